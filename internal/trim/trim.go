// Package trim cuts a request's input to a token budget while keeping the conversation valid:
// the system prompt and tools are kept whole, the latest turn is kept, older turns are dropped
// or trimmed oldest first, a tool call is never separated from its result, and a text is cut
// at a boundary that never falls inside a UTF-8 sequence. Cutting semantically, a text ends at
// the end of a section, else of a paragraph, else of a sentence, and never inside a fenced code
// block; cutting at a fixed size, it ends where the budget runs out, on a character boundary.
//
// A text cut keeps its beginning. Nothing is added to mark the cut.
package trim

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/layer0ai/layer0/internal/llm"
)

// Options configure a cut.
type Options struct {
	// Budget is the most input tokens the result may have. Required.
	Budget int
	// Count counts a request's input tokens in the serving model's tokenizer. Required.
	Count func(*llm.Request) (int, error)
	// Fixed cuts texts at the budget instead of at semantic boundaries.
	Fixed bool
	// MaxPerText caps the tokens kept of any one text that has to be cut; 0 is no cap.
	MaxPerText int
}

// Result says what a cut did.
type Result struct {
	// Before and After are the input's tokens before and after the cut.
	Before, After int
	// TurnsDropped counts the turns dropped whole; MessagesDropped the messages in them.
	TurnsDropped, MessagesDropped int
	// TextsCut counts the texts that were shortened or removed.
	TextsCut int
}

// ErrTooSmall is returned (wrapped) when the budget cannot hold what must be kept: the system
// prompt, the tools, and the latest turn's structure.
var ErrTooSmall = errors.New("trim: the budget cannot hold the system prompt, tools and latest turn")

// maxRounds bounds the recounts: pieces are measured apart, and the whole may count a few
// tokens more, which the next round takes off.
const maxRounds = 4

// Cut returns req with its input cut to o.Budget tokens, or req itself (and a Result with
// Before == After) when it fits. req is not modified; the returned request shares its
// unchanged parts.
func Cut(req *llm.Request, o Options) (*llm.Request, Result, error) {
	var res Result
	total, err := o.Count(req)
	if err != nil {
		return nil, res, err
	}
	res.Before, res.After = total, total
	if total <= o.Budget {
		return req, res, nil
	}
	fixedPart, err := o.Count(&llm.Request{Model: req.Model, System: req.System, Tools: req.Tools})
	if err != nil {
		return nil, res, err
	}
	if fixedPart >= o.Budget {
		return nil, res, fmt.Errorf("%w: the system prompt and tools take %d tokens of %d", ErrTooSmall, fixedPart, o.Budget)
	}
	c := cutter{o: o, req: req}
	target := o.Budget
	for range maxRounds {
		out, err := c.cut(total - target)
		if c.err != nil {
			return nil, res, c.err
		}
		if err != nil {
			return nil, res, err
		}
		n, err := o.Count(out)
		if err != nil {
			return nil, res, err
		}
		if n <= o.Budget {
			res.After, res.TurnsDropped, res.MessagesDropped, res.TextsCut = n, c.turns, c.msgs, c.texts
			return out, res, nil
		}
		target -= n - o.Budget
	}
	return nil, res, fmt.Errorf("%w: still over %d tokens after %d rounds", ErrTooSmall, o.Budget, maxRounds)
}

// cutter is one cut of a request.
type cutter struct {
	o                  Options
	req                *llm.Request
	turns, msgs, texts int
	scratch            llm.Request
	one                [1]llm.Message
	blk                [1]llm.Block
	err                error // the first counting error
}

// cost counts the tokens of messages alone.
func (c *cutter) cost(msgs []llm.Message) int {
	c.scratch = llm.Request{Model: c.req.Model, Messages: msgs}
	n, err := c.o.Count(&c.scratch)
	if err != nil && c.err == nil {
		c.err = fmt.Errorf("trim: counting a part of the input: %w", err)
	}
	return n
}

// textCost counts the tokens of one text.
func (c *cutter) textCost(s string) int {
	if s == "" {
		return 0
	}
	c.blk[0] = llm.Block{Type: llm.BlockText, Text: s}
	c.one[0] = llm.Message{Role: llm.RoleUser, Content: c.blk[:]}
	return c.cost(c.one[:])
}

// turns splits messages into turns: each starts at a user message that is not answering tool
// calls (holds no tool_result), and runs to the next one. Dropping whole turns keeps every tool
// call with its result and the conversation starting with a user message.
func turns(msgs []llm.Message) [][2]int {
	var out [][2]int
	start := 0
	for i := 1; i < len(msgs); i++ {
		if msgs[i].Role == llm.RoleUser && !hasResult(msgs[i].Content) {
			out = append(out, [2]int{start, i})
			start = i
		}
	}
	return append(out, [2]int{start, len(msgs)})
}

func hasResult(bs []llm.Block) bool {
	for i := range bs {
		if bs[i].Type == llm.BlockToolResult {
			return true
		}
	}
	return false
}

// cut takes excess tokens off the messages: whole turns oldest first while a turn is no more
// than what is still to go, then texts of the oldest turn left, then the next, down to the
// latest turn.
func (c *cutter) cut(excess int) (*llm.Request, error) {
	c.turns, c.msgs, c.texts = 0, 0, 0
	msgs := c.req.Messages
	ts := turns(msgs)
	var kept []llm.Message
	for k, t := range ts {
		part := msgs[t[0]:t[1]]
		last := k == len(ts)-1
		if excess <= 0 {
			kept = append(kept, part...)
			continue
		}
		n := c.cost(part)
		if !last && n <= excess {
			c.turns++
			c.msgs += len(part)
			excess -= n
			continue
		}
		trimmed, saved, ok := c.trimTurn(part, excess, last)
		if !ok {
			if last {
				return nil, fmt.Errorf("%w: the latest turn cannot be cut by %d tokens", ErrTooSmall, excess)
			}
			c.turns++
			c.msgs += len(part)
			excess -= n
			continue
		}
		excess -= saved
		kept = append(kept, trimmed...)
	}
	if excess > 0 {
		return nil, fmt.Errorf("%w: %d tokens over after cutting", ErrTooSmall, excess)
	}
	out := *c.req
	out.Messages = kept
	return &out, nil
}

// trimTurn cuts the texts of one turn, in order, until need tokens are saved; texts over
// MaxPerText are cut to it even past need. A text cut to nothing is removed unless it is the
// only content of its message. It reports false when the turn's texts cannot give need tokens.
func (c *cutter) trimTurn(part []llm.Message, need int, last bool) ([]llm.Message, int, bool) {
	out := make([]llm.Message, len(part))
	copy(out, part)
	saved := 0
	for i := range out {
		m := &out[i]
		var blocks []llm.Block
		for j := range m.Content {
			b := m.Content[j]
			switch b.Type {
			case llm.BlockText:
				nb, s, keep := c.trimText(b, need-saved)
				saved += s
				if keep {
					blocks = append(blocks, nb)
				}
			case llm.BlockToolResult:
				var inner []llm.Block
				for k := range b.Content {
					ib := b.Content[k]
					if ib.Type == llm.BlockText {
						nb, s, keep := c.trimText(ib, need-saved)
						saved += s
						if !keep {
							continue
						}
						ib = nb
					}
					inner = append(inner, ib)
				}
				b.Content = inner
				blocks = append(blocks, b)
			default:
				blocks = append(blocks, b)
			}
		}
		if len(blocks) == 0 {
			if i == len(out)-1 && m.Role == llm.RoleAssistant && !last {
				// An assistant message emptied at the end of an older turn: a placeholder would
				// cost more than it is worth, and the next turn starts with a user message.
				out = out[:i]
				break
			}
			return nil, 0, false
		}
		m.Content = blocks
	}
	return out, saved, saved >= need
}

// trimText cuts one text so that it gives up need tokens (or more, to honour MaxPerText); keep
// is false when nothing of it is kept.
func (c *cutter) trimText(b llm.Block, need int) (llm.Block, int, bool) {
	n := c.textCost(b.Text)
	keep := n - max(need, 0)
	if c.o.MaxPerText > 0 && keep > c.o.MaxPerText {
		keep = c.o.MaxPerText
	}
	if keep >= n {
		return b, 0, true
	}
	c.texts++
	if keep <= 0 {
		return b, n, false
	}
	s := c.prefix(b.Text, keep)
	if strings.TrimSpace(s) == "" {
		return b, n, false
	}
	b.Text = s
	return b, n - c.textCost(s), true
}

// prefix returns the longest beginning of s within keep tokens that ends at a boundary: for a
// fixed cut, any character boundary outside nothing; for a semantic one, the coarsest boundary
// (section, paragraph, sentence, word, character) whose best prefix keeps at least half of
// keep, never inside a fenced code block.
func (c *cutter) prefix(s string, keep int) string {
	if c.o.Fixed {
		return s[:c.best(s, runeBoundaries(s, nil), keep)]
	}
	fences := fencedBlocks(s)
	var got int
	for level := range levelCount {
		cands := boundaries(s, level, fences)
		got = c.best(s, cands, keep)
		if got > 0 && c.textCost(s[:got])*2 >= keep {
			break
		}
	}
	return strings.TrimRight(s[:got], " \t\r\n")
}

// best returns the largest candidate end (cands ascending) whose prefix costs at most keep
// tokens, or 0.
func (c *cutter) best(s string, cands []int, keep int) int {
	lo, hi, got := 0, len(cands)-1, 0
	for lo <= hi {
		mid := (lo + hi) / 2
		if c.textCost(s[:cands[mid]]) <= keep {
			got = cands[mid]
			lo = mid + 1
		} else {
			hi = mid - 1
		}
	}
	return got
}

// Boundary levels, coarsest first.
const (
	levelSection = iota
	levelParagraph
	levelSentence
	levelWord
	levelRune
	levelCount
)

// boundaries lists, ascending, the ends a prefix of s may have at level, outside fences.
func boundaries(s string, level int, fences [][2]int) []int {
	var out []int
	add := func(p int) {
		if p <= 0 || p > len(s) || insideFence(p, fences) {
			return
		}
		if n := len(out); n > 0 && out[n-1] >= p {
			return
		}
		out = append(out, p)
	}
	switch level {
	case levelSection:
		// Before a heading line (a '#' at a line start, outside fences), and after a fence.
		for i := 0; i < len(s); i++ {
			if s[i] == '#' && i > 0 && s[i-1] == '\n' {
				add(i)
			}
		}
		for _, f := range fences {
			add(f[1])
		}
		sortInts(out)
	case levelParagraph:
		for i := 0; i+1 < len(s); i++ {
			if s[i] == '\n' && s[i+1] == '\n' {
				add(i)
			}
		}
		for _, f := range fences {
			add(f[0])
			add(f[1])
		}
		sortInts(out)
	case levelSentence:
		for i := 0; i < len(s); i++ {
			switch s[i] {
			case '.', '!', '?':
				if i+1 == len(s) || s[i+1] == ' ' || s[i+1] == '\n' {
					add(i + 1)
				}
			}
		}
	case levelWord:
		for i := 0; i < len(s); i++ {
			if s[i] == ' ' || s[i] == '\n' || s[i] == '\t' {
				add(i)
			}
		}
	default:
		out = runeBoundaries(s, fences)
	}
	if len(out) == 0 || out[len(out)-1] != len(s) {
		add(len(s))
	}
	return out
}

// runeBoundaries lists every character boundary of s (after the first character), outside
// fences.
func runeBoundaries(s string, fences [][2]int) []int {
	out := make([]int, 0, len(s))
	for i := 1; i <= len(s); i++ {
		if (i == len(s) || utf8.RuneStart(s[i])) && !insideFence(i, fences) {
			out = append(out, i)
		}
	}
	return out
}

func insideFence(p int, fences [][2]int) bool {
	for _, f := range fences {
		if p > f[0] && p < f[1] {
			return true
		}
	}
	return false
}

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// fencedBlocks returns the byte ranges of s's fenced code blocks, from the start of the opening
// fence line to the end of the closing fence line (its newline included), or to the end of s
// for a fence never closed. A fence is a line of three or more backticks or tildes, indented by
// at most three spaces; the closing fence uses the opening's character and is at least as long.
func fencedBlocks(s string) [][2]int {
	var out [][2]int
	open, ch, width := -1, byte(0), 0
	for ls := 0; ls < len(s); {
		le := strings.IndexByte(s[ls:], '\n')
		next := len(s)
		if le >= 0 {
			le += ls
			next = le + 1
		} else {
			le = len(s)
		}
		line := s[ls:le]
		ind := 0
		for ind < len(line) && ind < 4 && line[ind] == ' ' {
			ind++
		}
		if ind < 4 && ind < len(line) && (line[ind] == '`' || line[ind] == '~') {
			c := line[ind]
			n := 0
			for ind+n < len(line) && line[ind+n] == c {
				n++
			}
			switch {
			case open < 0 && n >= 3:
				open, ch, width = ls, c, n
			case open >= 0 && c == ch && n >= width && strings.TrimSpace(line[ind+n:]) == "":
				out = append(out, [2]int{open, next})
				open = -1
			}
		}
		ls = next
	}
	if open >= 0 {
		out = append(out, [2]int{open, len(s)})
	}
	return out
}
