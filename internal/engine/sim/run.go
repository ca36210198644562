package sim

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

// run is one request's state and scratch memory, pooled by the engine so that a request
// allocates almost nothing. It is planned whole before streaming: the answer's tokens are known
// up front, which makes max_tokens and stop sequences exact (a sequence spanning two deltas is
// found in the full text, and nothing past its start is ever sent).
type run struct {
	e     *Engine
	ctx   context.Context
	done  <-chan struct{}
	sink  llm.Sink
	ev    llm.Event
	timer *time.Timer

	prompt []uint32 // the prompt's token ids
	hashes []uint64 // its block keys
	out    []uint32 // the answer's token ids, every block's
	text   []byte   // the text answer's bytes, for stop sequence search
	json   []byte   // tool input scratch

	seed      uint64
	usage     llm.Usage
	held      int64 // KV blocks held
	total     int   // tokens held: prompt and output so far
	failAfter int   // injected failure after this many output tokens; 0: none
	produced  int   // output tokens so far

	blocks  [2]block
	nblocks int
	stop    llm.StopReason
	stopSeq string
}

// block is one content block of the answer.
type block struct {
	typ      llm.BlockType
	id, name string // tool_use
	from, to int    // its tokens: out[from:to]
	// src, when set, is the text the tokens encode; deltas are cut from it at UTF-8 boundaries
	// (a token can end inside a character). When empty, each token's own bytes are a delta.
	src string
	// visible is how many bytes of the block's text may be sent: a stop sequence starts there.
	visible int
}

func (r *run) reset(e *Engine, ctx context.Context, sink llm.Sink) {
	r.e, r.ctx, r.done, r.sink = e, ctx, ctx.Done(), sink
	r.seed, r.usage, r.held, r.total, r.failAfter, r.produced = 0, llm.Usage{}, 0, 0, 0, 0
	r.nblocks, r.stop, r.stopSeq = 0, llm.StopEndTurn, ""
	r.out, r.text, r.json = r.out[:0], r.text[:0], r.json[:0]
}

// release drops the references a pooled run must not keep.
func (r *run) release() {
	r.e, r.ctx, r.done, r.sink = nil, nil, nil, nil
	r.blocks = [2]block{}
	r.stopSeq = ""
	r.ev = llm.Event{}
}

func (r *run) addBlock(b block) { r.blocks[r.nblocks] = b; r.nblocks++ }

// addText adds a text block of src, whose tokens are r.out, cut at the first of the stop
// sequences stops it meets (findStop); it reports whether one was met, which ends the answer.
func (r *run) addText(src string, stops []string) (stopped bool) {
	b := block{typ: llm.BlockText, to: len(r.out), src: src, visible: len(src)}
	if len(stops) > 0 {
		r.text = append(r.text[:0], src...)
		if cut, ok := r.findStop(stops, 0); ok {
			b.to, b.visible = len(r.out), cut
			stopped = true
		}
	}
	r.addBlock(b)
	return stopped
}

// plan decides the answer, at most limit tokens: a tool call, or text.
func (r *run) plan(req *llm.Request, limit int) error {
	tool, auto, err := chooseTool(req, r.seed)
	if err != nil {
		return err
	}
	if tool >= 0 && r.planTool(req, tool, auto, limit) {
		return nil
	}
	if req.ResponseFormat.JSON() {
		r.planJSON(req, limit)
		return nil
	}
	r.planText(req, limit)
	return nil
}

// planTool plans a tool_use block, after a one-sentence text block when the model chose the
// tool itself. When the input does not fit in limit tokens even at its smallest, a forced call
// (tool_choice any or tool) is cut as the real API cuts it: the tool_use block holds the first
// limit tokens of the input, a JSON fragment, and the stop reason is max_tokens; a call the
// model chose itself is not made (planTool reports false) and the answer is text cut by
// max_tokens. Stop sequences apply to the text only: one met there ends the answer before the
// call.
func (r *run) planTool(req *llm.Request, i int, auto bool, limit int) bool {
	t := &req.Tools[i]
	g := inputGen{r: rng(r.seed ^ 0x5bd1e995)}
	id := toolID(&g.r)
	if auto {
		preface := "I'll use the " + t.Name + " tool."
		r.out = r.e.tok.Encode(r.out[:0], preface)
		if len(r.out) >= limit {
			r.out, r.nblocks = r.out[:0], 0
			return false
		}
		if r.addText(preface, req.StopSequences) {
			return true
		}
	}
	var full string // the input the model writes when it has room
	given := givenInput(lastUser(req), t.Name)
	for _, minimal := range []bool{false, true} {
		g.minimal = minimal
		if given != nil && !minimal {
			r.json = append(r.json[:0], given...)
		} else {
			r.json = g.object(r.json[:0], t.InputSchema)
		}
		from := len(r.out)
		input := string(r.json)
		if !minimal {
			full = input
		}
		r.out = r.e.tok.Encode(r.out, input)
		if len(r.out) <= limit {
			r.addBlock(block{typ: llm.BlockToolUse, id: id, name: t.Name, from: from, to: len(r.out), src: input, visible: len(input)})
			r.stop = llm.StopToolUse
			return true
		}
		r.out = r.out[:from]
	}
	if auto || limit < 1 {
		r.out, r.nblocks = r.out[:0], 0
		return false
	}
	// Forced, the model starts the call anyway and max_tokens cuts its input short. The deltas
	// are cut from full at token ends, less a trailing incomplete character.
	r.out = r.e.tok.Encode(r.out[:0], full)[:limit]
	r.addBlock(block{typ: llm.BlockToolUse, id: id, name: t.Name, to: limit, src: full, visible: len(full)})
	r.stop = llm.StopMaxTokens
	return true
}

// planText plans a text block: lorem or echo, cut at limit tokens and at the first stop sequence.
func (r *run) planText(req *llm.Request, limit int) {
	var src string
	if r.e.cfg.Mode == "echo" {
		src = userText(lastUser(req))
		if !utf8.ValidString(src) {
			src = strings.ToValidUTF8(src, "\uFFFD")
		}
		r.out = r.e.tok.Encode(r.out[:0], src)
	} else {
		target := minAnswer + int((r.seed>>32)%spanAnswer)
		r.out = r.e.lex.generate(r.out[:0], r.seed, target, limit)
	}
	if len(r.out) > limit {
		r.out = r.out[:limit]
		r.stop = llm.StopMaxTokens
	}
	b := block{typ: llm.BlockText, to: len(r.out), visible: maxInt}
	if src != "" || len(req.StopSequences) > 0 {
		r.text = r.e.tok.Decode(r.text[:0], r.out)
	}
	if src != "" {
		b.src = truncate(src, r.text)
		b.visible = len(b.src)
	}
	if len(req.StopSequences) > 0 {
		if cut, ok := r.findStop(req.StopSequences, 0); ok {
			b.to, b.visible = len(r.out), cut
		}
	}
	r.addBlock(b)
}

const maxInt = int(^uint(0) >> 1)

// truncate returns the prefix of src as long as text (text is src's first bytes), less a
// trailing incomplete character: max_tokens can end the answer inside one, and a delta must be
// valid UTF-8.
func truncate(src string, text []byte) string {
	src = src[:len(text)]
	i := len(src) - 1
	for i > 0 && !utf8.RuneStart(src[i]) {
		i--
	}
	if i >= 0 && !utf8.FullRuneInString(src[i:]) {
		src = src[:i]
	}
	return src
}

// findStop finds the stop sequence the model meets first in r.text, the bytes of the tokens
// out[from:], ignoring empty sequences and those that are not valid UTF-8: the one completed by the earliest token, the first listed among those completed by
// the same token (vLLM checks them in order after each token). On a match it ends the answer
// with that token, records the stop, and returns how many bytes of r.text precede the sequence.
func (r *run) findStop(seqs []string, from int) (int, bool) {
	best, bestTok, bestAt := -1, 0, 0
	for i, s := range seqs {
		if s == "" || !utf8.ValidString(s) { // text is decoded: such a sequence never appears
			continue
		}
		at := indexString(r.text, s)
		if at < 0 {
			continue
		}
		if k := r.tokenEnding(from, at+len(s)); best < 0 || k < bestTok {
			best, bestTok, bestAt = i, k, at
		}
	}
	if best < 0 {
		return 0, false
	}
	r.out = r.out[:bestTok+1]
	r.stop, r.stopSeq = llm.StopSequence, seqs[best]
	return bestAt, true
}

// tokenEnding returns the index in out of the token, from out[from] on, that holds the byte
// before offset end of their text.
func (r *run) tokenEnding(from, end int) int {
	off := 0
	for k := from; k < len(r.out); k++ {
		off += len(r.e.tok.Token(r.out[k]))
		if off >= end {
			return k
		}
	}
	return len(r.out) - 1
}

// indexString is strings.Index over a byte slice, without converting it.
func indexString(b []byte, s string) int {
	for i := 0; i+len(s) <= len(b); {
		j := bytes.IndexByte(b[i:len(b)-len(s)+1], s[0])
		if j < 0 {
			return -1
		}
		i += j
		if string(b[i:i+len(s)]) == s {
			return i
		}
		i++
	}
	return -1
}

// stream sends the planned answer: Start, then after the prefill delay each block's tokens one
// inter-token latency apart, then Stop. It flushes the sink before every wait and at the end.
func (r *run) stream(model string, prefill time.Duration) error {
	ev := &r.ev
	*ev = llm.Event{Kind: llm.EventStart, Model: model, Usage: r.usage}
	if err := r.send(); err != nil {
		return err
	}
	if err := r.wait(prefill); err != nil {
		return err
	}
	tok := r.e.tok
	for i := range r.nblocks {
		b := &r.blocks[i]
		*ev = llm.Event{Kind: llm.EventBlockStart, Index: i, Block: b.typ, ID: b.id, Name: b.name}
		if err := r.send(); err != nil {
			return err
		}
		kind := llm.EventTextDelta
		if b.typ == llm.BlockToolUse {
			kind = llm.EventToolDelta
		}
		off, pend := 0, 0 // bytes before the current token; start of the bytes not yet sent
		for k := b.from; k < b.to; k++ {
			if r.produced > 0 {
				if err := r.wait(r.e.cfg.InterTokenLatency); err != nil {
					return err
				}
			}
			r.grow()
			t := tok.Token(r.out[k])
			end := off + len(t)
			var chunk string
			switch {
			case b.src == "":
				if off < b.visible {
					chunk = t[:min(len(t), b.visible-off)]
				}
			case end >= len(b.src) || utf8.RuneStart(b.src[end]):
				chunk = b.src[min(pend, b.visible):min(end, b.visible)]
				pend = end
			}
			off = end
			if chunk != "" {
				*ev = llm.Event{Kind: kind, Index: i, Text: chunk}
				if err := r.send(); err != nil {
					return err
				}
			}
			if r.produced == r.failAfter {
				if err := r.sink.Flush(); err != nil {
					return fmt.Errorf("sim: %w", err)
				}
				return &apierr.Error{Kind: apierr.API, Message: r.e.cfg.Fail.Message,
					Cause: fmt.Errorf("sim: injected failure after %d output tokens", r.produced)}
			}
		}
		*ev = llm.Event{Kind: llm.EventBlockStop, Index: i}
		if err := r.send(); err != nil {
			return err
		}
	}
	r.usage.OutputTokens = r.produced
	*ev = llm.Event{Kind: llm.EventStop, Stop: r.stop, StopSequence: r.stopSeq, Usage: r.usage}
	if err := r.send(); err != nil {
		return err
	}
	if err := r.sink.Flush(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// grow counts one output token, taking one more KV block when it starts one.
func (r *run) grow() {
	r.produced++
	r.total++
	if int64(r.total) > r.held*int64(r.e.cfg.BlockTokens) {
		r.held++
		r.e.heldBlocks.Add(1)
	}
}

func (r *run) send() error {
	if err := r.sink.Send(&r.ev); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// wait flushes the sink and sleeps d, returning early with ctx's error if it ends. With d zero
// it only checks ctx: no flush, no timer, so a fast engine's whole answer is one write.
func (r *run) wait(d time.Duration) error {
	if d <= 0 {
		select {
		case <-r.done:
			return r.ctx.Err()
		default:
			return nil
		}
	}
	if err := r.sink.Flush(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if r.timer == nil {
		r.timer = time.NewTimer(d)
	} else {
		r.timer.Reset(d)
	}
	select {
	case <-r.done:
		r.timer.Stop()
		return r.ctx.Err()
	case <-r.timer.C:
		return nil
	}
}
