package openai

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/layer0ai/layer0/internal/llm"

	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/upstream/fake"
	"github.com/layer0ai/layer0/internal/wire/sse"
)

// vllmModel is the engine's model name in benchStream.
const vllmModel = "meta-llama/Llama-3.1-8B-Instruct"

// benchStream is an n-token Chat Completions stream as vLLM writes it when layer0 asked for
// usage: a role chunk, one chunk per token, a finish chunk, the usage-only chunk, [DONE].
func benchStream(n int) []byte { return benchStreamOf(n, false) }

// benchStreamOf is benchStream, each content chunk given a last member of its own with obfuscate,
// as the hosted API's "obfuscation" (a random string of random length): no two chunks then end
// alike, and the shortcut's template never matches.
func benchStreamOf(n int, obfuscate bool) []byte {
	var b bytes.Buffer
	head := `data: {"id":"chatcmpl-8d2f0c5b1e7a4c3f9b6a2d1e0f3c4b5a","object":"chat.completion.chunk","created":1735689600,"model":"` + vllmModel + `","choices":[`
	b.WriteString(head + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	words := []string{" The", " lighthouse", " keeper", " watched", " the", " sea", ",", " and", " the", " sea"}
	for i := range n {
		end := "]}"
		if obfuscate {
			end = `],"obfuscation":"` + "Xq3vT8pLm2Rk"[:2+i%10] + `"}`
		}
		fmt.Fprintf(&b, "%s{\"index\":0,\"delta\":{\"content\":%q},\"logprobs\":null,\"finish_reason\":null}%s\n\n", head, words[i%len(words)], end)
	}
	b.WriteString(head + `{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}` + "\n\n")
	b.WriteString(head + fmt.Sprintf(`],"usage":{"prompt_tokens":40,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":null}}`, 40+n, n) + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// BenchmarkForwardStream: the gateway's own work on a 100-token vLLM stream passed through to
// an OpenAI client — split the chunks, check each, read usage, drop the usage chunk the client
// did not ask for, give the client its model name, copy them — from a buffer that holds the
// whole answer, as a fast engine's arrives; the client's model the engine's ("same") or another
// ("renamed"); chunks that never repeat ("obfuscated"), which the shortcut cannot take.
func BenchmarkForwardStream(b *testing.B) {
	for _, bc := range []struct {
		name, model string
		obfuscate   bool
	}{{"same", vllmModel, false}, {"renamed", "llama", false}, {"obfuscated", vllmModel, true}} {
		b.Run(bc.name, func(b *testing.B) {
			stream := benchStreamOf(100, bc.obfuscate)
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			br := bufio.NewReaderSize(nil, 16<<10)
			for b.Loop() {
				br.Reset(bytes.NewReader(stream))
				src := passthrough.Source{Body: br, ContentType: "text/event-stream", Stream: true, ClientModel: bc.model}
				pl := newChatPolicy(true)
				res, err := passthrough.Forward(pl, &src, fake.Writer(io.Discard))
				pl.release()
				if err != nil || res.Deltas != 100 || res.Usage.OutputTokens != 100 {
					b.Fatalf("forward: %+v, %v", res, err)
				}
			}
		})
	}
}

// plain is the Chat Completions policy without its Shortcut: every chunk split and checked by
// Event.
type plain struct{ p *chatPolicy }

func (w plain) Event(e *passthrough.Event, u *llm.Usage) error { return w.p.Event(e, u) }
func (w plain) End(partial []byte) error                       { return w.p.End(partial) }
func (w plain) Answer(b []byte, u *llm.Usage) (passthrough.Answer, error) {
	return w.p.Answer(b, u)
}

// counting is the policy with its Shortcut, counting the events Match takes.
type counting struct {
	*chatPolicy
	matched int
}

func (c *counting) Match(buf []byte) passthrough.Matched {
	m := c.chatPolicy.Match(buf)
	if m.N > 0 {
		c.matched++
	}
	return m
}

// forwarded is what one Forward gave: the client's bytes, the result, the error.
type forwarded struct {
	out string
	res passthrough.Result
	err error
}

// forwardBoth passes stream through, read in pieces of at most chunk bytes, to a client of
// model with the shortcut and without, and returns both, and how many chunks the shortcut took.
func forwardBoth(stream []byte, chunk int, model string, inject bool) (fast, slow forwarded, matched int) {
	run := func(p passthrough.Policy) forwarded {
		var out bytes.Buffer
		src := passthrough.Source{Body: iotest.HalfReader(&chunkedReader{b: stream, n: chunk}), ContentType: "text/event-stream",
			Stream: true, ClientModel: model}
		res, err := passthrough.Forward(p, &src, fake.Writer(&out))
		return forwarded{out.String(), res, err}
	}
	// The pooled policy, as the engine uses it: what one stream learned must not reach the next.
	c := &counting{chatPolicy: newChatPolicy(inject)}
	fast = run(c)
	c.release()
	slow = run(plain{&chatPolicy{inject: inject}})
	return fast, slow, c.matched
}

// same reports how fast and slow differ, or "".
func differ(fast, slow forwarded) string {
	switch {
	case (fast.err == nil) != (slow.err == nil):
		return fmt.Sprintf("errors differ: shortcut %v, without %v", fast.err, slow.err)
	case fast.err != nil && fast.err.Error() != slow.err.Error():
		return fmt.Sprintf("errors differ: shortcut %v, without %v", fast.err, slow.err)
	case fast.out != slow.out:
		return fmt.Sprintf("outputs differ:\nshortcut %q\nwithout  %q", fast.out, slow.out)
	case fast.res != slow.res:
		return fmt.Sprintf("results differ: shortcut %+v, without %+v", fast.res, slow.res)
	}
	return ""
}

// chunkStream is a stream of data: events, one per chunk, with the line end eol.
func chunkStream(eol string, chunks ...string) []byte {
	var b bytes.Buffer
	for _, c := range chunks {
		b.WriteString(c + eol + eol)
	}
	return b.Bytes()
}

// vllm returns vLLM's chunk (after "data: ") with the delta and finish_reason given.
func vllm(model, delta, finish string) string {
	return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1735689600,"model":"` + model +
		`","choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + finish + `}]}`
}

// TestShortcutForwardsTheSame: for streams of every engine's shape, the client gets the same
// bytes, deltas and usage with the shortcut as without it, however the stream is read, and
// the shortcut takes the text chunks of the common shapes.
func TestShortcutForwardsTheSame(t *testing.T) {
	const m = "meta-llama/Llama-3.1-8B-Instruct"
	role := vllm(m, `{"role":"assistant","content":""}`, "null")
	text := func(s string) string { return vllm(m, `{"content":`+s+`}`, "null") }
	finish := vllm(m, `{"content":""}`, `"stop","stop_reason":null`)
	usage := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1735689600,"model":"` + m + `","choices":[],"usage":{"prompt_tokens":4,"total_tokens":9,"completion_tokens":5}}`
	done := "data: [DONE]"
	errChunk := `data: {"error": {"object": "error", "message": "The engine failed.", "type": "InternalServerError", "param": null, "code": 500}}`
	llamaCpp := func(s string) string {
		return `data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":` + s + `}}],"created":1735689600,"id":"chatcmpl-x","model":"qwen2.5-7b-instruct-q4_k_m.gguf","system_fingerprint":"b4500","object":"chat.completion.chunk"}`
	}
	sglang := func(s string) string {
		return `data: {"id":"a1","object":"chat.completion.chunk","created":1735689600,"model":"qwen","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":` + s + `,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`
	}
	tool := func(args string) string {
		return vllm(m, `{"tool_calls":[{"index":0,"function":{"arguments":`+args+`}}]}`, "null")
	}
	texts := []string{`"Hello"`, `" wörld ✓"`, `"\"quoted\" \\ \n\t\u00e9\ud83d\ude00"`, `""`, `"finish_reason\":\"stop"`, `"model"`, `" 🌊"`}
	var textChunks []string
	for _, s := range texts {
		textChunks = append(textChunks, text(s))
	}
	cat := func(parts ...any) []string {
		var out []string
		for _, p := range parts {
			switch p := p.(type) {
			case string:
				out = append(out, p)
			case []string:
				out = append(out, p...)
			}
		}
		return out
	}
	streams := []struct {
		name    string
		stream  []byte
		inject  bool
		matches bool // the shortcut takes chunks (at least when the stream is read whole)
	}{
		{"vLLM, usage injected", chunkStream("\n", cat(role, textChunks, finish, usage, done)...), true, true},
		{"vLLM, usage asked for", chunkStream("\n", cat(role, textChunks, finish, usage, done)...), false, true},
		{"vLLM, no usage, no [DONE]", chunkStream("\n", cat(role, textChunks, finish)...), false, true},
		{"CRLF", chunkStream("\r\n", cat(role, textChunks, finish, usage, done)...), true, true},
		{"data: without its space", chunkStream("\n", cat(role, textChunks, finish, usage, done)...)[0:0], true, false},
		{"error chunk mid-stream", chunkStream("\n", cat(role, textChunks, errChunk, textChunks, finish, done)...), true, true},
		{"broken text mid-stream", chunkStream("\n", cat(role, textChunks, text(`"bad\q"`), finish, done)...), true, true},
		{"invalid UTF-8 mid-stream", chunkStream("\n", cat(role, textChunks, text("\"bad\xff\""), finish, done)...), true, true},
		{"control byte in the text", chunkStream("\n", cat(role, textChunks, text("\"a\x01b\""), finish, done)...), true, true},
		{"cut mid-chunk", chunkStream("\n", cat(role, textChunks)...)[:len(chunkStream("\n", cat(role, textChunks)...))-20], true, true},
		{"llama.cpp, model after the choices", chunkStream("\n", cat(llamaCpp(`""`), llamaCpp(`"a"`), llamaCpp(`"b"`), llamaCpp(`"ü"`),
			`data: {"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1735689600,"id":"chatcmpl-x","model":"qwen2.5-7b-instruct-q4_k_m.gguf","object":"chat.completion.chunk"}`, done)...), true, true},
		{"SGLang, reasoning, usage null", chunkStream("\n", cat(sglang(`"think"`), sglang(`"ing"`), sglang(`" more"`),
			`data: {"id":"a1","object":"chat.completion.chunk","created":1735689600,"model":"qwen","choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}],"usage":null}`, done)...), true, true},
		{"tool call arguments", chunkStream("\n", cat(role, vllm(m, `{"tool_calls":[{"id":"c1","type":"function","index":0,"function":{"name":"f"}}]}`, "null"),
			tool(`"{\"a\""`), tool(`":1"`), tool(`"}"`), vllm(m, `{"content":""}`, `"tool_calls"`), done)...), true, true},
		{"spaced JSON", chunkStream("\n", `data: {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}`,
			`data: {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": null}]}`,
			`data: {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content": "b"}, "finish_reason": null}]}`,
			`data: {"id": "c", "model": "m", "choices": [{"index": 0, "delta": {"content" : "c"}, "finish_reason" : "length"}]}`, done), true, true},
		{"continuous usage", chunkStream("\n", vllm(m, `{"content":"a"}`, "null")[:len(vllm(m, `{"content":"a"}`, "null"))-1]+`,"usage":{"prompt_tokens":4,"completion_tokens":1}}`,
			vllm(m, `{"content":"b"}`, "null")[:len(vllm(m, `{"content":"b"}`, "null"))-1]+`,"usage":{"prompt_tokens":4,"completion_tokens":2}}`,
			finish, done), true, false},
		{"a finish_reason in a text chunk's shape", chunkStream("\n", cat(role, text(`"a"`), text(`"b"`), vllm(m, `{"content":"c"}`, `"length"`), text(`"d"`), done)...), true, true},
		{"[DONE] before a finish", chunkStream("\n", cat(role, textChunks, done)...), true, true},
		{"keep-alive comments", chunkStream("\n", cat(role, text(`"a"`), ": ping", text(`"b"`), text(`"c"`), finish, done)...), true, true},
	}
	// data: without its space, every chunk of the vLLM stream.
	var nospace []string
	for _, c := range cat(role, textChunks, finish, usage, done) {
		nospace = append(nospace, "data:"+c[len("data: "):])
	}
	streams[4].stream, streams[4].matches = chunkStream("\n", nospace...), true
	for _, s := range streams {
		for _, model := range []string{"", m, "client-model", "qwen2.5-7b-instruct-q4_k_m.gguf", "m"} {
			for _, n := range []int{1 << 16, 1, 7, 100, 333} {
				fast, slow, matched := forwardBoth(s.stream, n, model, s.inject)
				if d := differ(fast, slow); d != "" {
					t.Fatalf("%s, client model %q, reads of %d: %s", s.name, model, n, d)
				}
				if n == 1<<16 && (matched > 0) != s.matches {
					t.Errorf("%s, client model %q: the shortcut took %d chunks", s.name, model, matched)
				}
			}
		}
	}
}

// FuzzMatch: a chunk Match takes, after any chunks Event checked, is one event as the SSE
// reader splits it, and one Event passes as it is taken — content, a delta, no usage, no
// error, the policy's state unchanged — with the model renamed to the same bytes.
func FuzzMatch(f *testing.F) {
	const m = "meta-llama/Llama-3.1-8B-Instruct"
	learn := chunkStream("\n", vllm(m, `{"role":"assistant","content":""}`, "null"), vllm(m, `{"content":"Hi"}`, "null"))
	f.Add(learn, chunkStream("\n", vllm(m, `{"content":" there \u00e9 ✓"}`, "null")))
	f.Add(learn, chunkStream("\n", vllm(m, `{"content":"a\"b\\"}`, "null"), vllm(m, `{"content":"c"}`, "null")))
	f.Add(learn, chunkStream("\n", vllm(m, `{"content":"x"}`, `"stop"`)))
	f.Add(learn, chunkStream("\n", vllm(m, `{"content":"x\ud800"}`, "null")))
	f.Add(chunkStream("\r\n", vllm(m, `{"content":"Hi"}`, "null")), chunkStream("\r\n", vllm(m, `{"content":"Ho"}`, "null")))
	f.Add([]byte(`data:{"choices":[{"delta":{"content":"a"}}],"model":"m","object":"chat.completion.chunk"}`+"\n\n"),
		[]byte(`data:{"choices":[{"delta":{"content":"b"}}],"model":"m","object":"chat.completion.chunk"}`+"\n\n"))
	f.Add([]byte(`data: {"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{"}}]}}],"usage":null}`+"\n\n"),
		[]byte(`data: {"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"}"}}]}}],"usage":null}`+"\n\n"))
	f.Fuzz(func(t *testing.T, learn, buf []byte) {
		pl := &chatPolicy{}
		r := sse.NewReader(bytes.NewReader(learn))
		for {
			raw, name, data, err := r.Next()
			if err != nil {
				break
			}
			if len(name) == 0 && len(data) == 0 {
				continue
			}
			var u llm.Usage
			ev := passthrough.Event{Raw: raw, Name: name, Data: data, Started: true}
			if pl.Event(&ev, &u) != nil || ev.Kind == passthrough.Last {
				break
			}
		}
		finished := pl.finished
		mt := pl.Match(buf)
		if mt.N == 0 {
			return
		}
		raw, name, data, err := sse.NewReader(bytes.NewReader(buf)).Next()
		if err != nil || len(raw) != mt.N || len(name) != 0 {
			t.Fatalf("Match took %d bytes of %q; the reader: %d bytes, name %q, %v", mt.N, buf, len(raw), name, err)
		}
		var u llm.Usage
		ev := passthrough.Event{Raw: raw, Name: name, Data: data, Started: true}
		if err := pl.Event(&ev, &u); err != nil || ev.Kind != passthrough.Content || !ev.Delta || !mt.Delta ||
			u != (llm.Usage{}) || pl.finished != finished {
			t.Fatalf("Match took %q (%+v); Event: %v, kind %v, delta %v, usage %+v, finished %v -> %v",
				raw, mt, err, ev.Kind, ev.Delta, u, finished, pl.finished)
		}
		for _, model := range []string{"", "client-x"} {
			rn := passthrough.NewRenamer(model)
			slow := raw
			if ev.ModelEnd > ev.ModelStart {
				slow = rn.EventAt(raw, data, ev.ModelStart, ev.ModelEnd)
			}
			fast := raw
			if mt.ModelEnd > mt.ModelStart {
				if v := rn.Value(raw[mt.ModelStart:mt.ModelEnd]); v != nil {
					fast = append(append(append([]byte(nil), raw[:mt.ModelStart]...), v...), raw[mt.ModelEnd:]...)
				}
			}
			if !bytes.Equal(fast, slow) {
				t.Fatalf("client model %q: the shortcut renames %q to %q, Event's model to %q", model, raw, fast, slow)
			}
		}
	})
}

// FuzzShortcut: whatever follows a stream's first text chunk, however it is cut into reads and
// whatever the client's model, forwarding with the shortcut writes the same bytes, counts the
// same deltas and usage, and fails the same way as splitting and checking every chunk.
func FuzzShortcut(f *testing.F) {
	whole := benchStream(8) // short: the fuzzer minimizes what it finds, a byte at a time
	start := bytes.Index(whole, []byte("\n\n"))
	start += 2 + bytes.Index(whole[start+2:], []byte("\n\n")) + 2 // after the role chunk and one text chunk
	f.Add(whole[start:], uint16(4096), uint8(0))
	f.Add(whole[start:], uint16(7), uint8(1))
	f.Add(whole[start:], uint16(100), uint8(2))
	f.Add([]byte(vllm(vllmModel, `{"content":"x\q"}`, "null")+"\n\n"), uint16(1000), uint8(1))
	f.Add(chunkStream("\r\n", vllm(vllmModel, `{"content":"a"}`, "null"), vllm(vllmModel, `{"content":"b"}`, "null"), "data: [DONE]"), uint16(3), uint8(1))
	models := []string{"", vllmModel, "client-model"}
	f.Fuzz(func(t *testing.T, tail []byte, chunk uint16, model uint8) {
		stream := append(whole[:start:start], tail...)
		fast, slow, _ := forwardBoth(stream, int(chunk%8192)+1, models[int(model)%len(models)], model&4 == 0)
		if d := differ(fast, slow); d != "" {
			t.Fatal(d)
		}
	})
}

// TestMatch: Match takes nothing before a content chunk was checked, then a chunk whole (its
// blank line in hand) that differs from the last content chunk only in its text, which must be
// a valid JSON string.
func TestMatch(t *testing.T) {
	const m = "meta-llama/Llama-3.1-8B-Instruct"
	text := func(s string) string { return vllm(m, `{"content":`+s+`}`, "null") + "\n\n" }
	pl := &chatPolicy{}
	if n := pl.Match([]byte(text(`"a"`))).N; n != 0 {
		t.Fatalf("matched %d bytes before a content chunk", n)
	}
	ev := passthrough.Event{Raw: []byte(text(`"first"`)), Started: true}
	ev.Data = ev.Raw[len("data: ") : len(ev.Raw)-2]
	if err := pl.Event(&ev, new(llm.Usage)); err != nil || !ev.Delta {
		t.Fatalf("Event: %v, delta %v", err, ev.Delta)
	}
	in := text(`"hi \"there\" ✓"`)
	mt := pl.Match([]byte(in + "data: x"))
	if mt.N != len(in) || !mt.Delta || in[mt.ModelStart:mt.ModelEnd] != `"`+m+`"` {
		t.Fatalf("Match = %+v; want %d bytes, a delta, the model at its place", mt, len(in))
	}
	for _, in := range []string{in[:len(in)-1], in[:len(in)-2], strings.Replace(in, "\n\n", "\r\n\r\n", 1),
		strings.Replace(in, "data: ", "data:", 1), strings.Replace(in, `"hi`, `"h\qi`, 1), strings.Replace(in, "hi", "h\xffi", 1),
		strings.Replace(in, "hi", "h\ni", 1), strings.Replace(in, `"finish_reason":null`, `"finish_reason":"stop"`, 1),
		strings.Replace(in, `"index":0`, `"index":1`, 1), strings.Replace(in, m, "other", 1), "\n" + in, ": ping\n\n" + in,
		strings.Replace(in, "}]}", `}],"usage":{"prompt_tokens":1}}`, 1), text("1"), text("null")} {
		if n := pl.Match([]byte(in)).N; n != 0 {
			t.Errorf("Match(%q) = %d, want 0", in, n)
		}
	}
}

// TestPolicyReset: a pooled policy starts its next stream knowing nothing of the last one — no
// template (a chunk of the last stream's shape may be the next one's prelude), no finish, no
// usage to drop — and keeps its buffers.
func TestPolicyReset(t *testing.T) {
	const m = "meta-llama/Llama-3.1-8B-Instruct"
	chunk := vllm(m, `{"content":"a"}`, `"stop"`) + "\n\n"
	text := vllm(m, `{"content":"a"}`, "null") + "\n\n"
	pl := newChatPolicy(true)
	for _, c := range []string{text, chunk} {
		ev := passthrough.Event{Raw: []byte(c), Started: true}
		ev.Data = ev.Raw[len("data: ") : len(ev.Raw)-2]
		if err := pl.Event(&ev, new(llm.Usage)); err != nil {
			t.Fatal(err)
		}
	}
	if pl.Match([]byte(text)).N == 0 || !pl.finished {
		t.Fatalf("before reset: Match %+v, finished %v", pl.Match([]byte(text)), pl.finished)
	}
	b := pl.last.b[:1]
	pl.reset()
	if n := pl.Match([]byte(text)).N; n != 0 || pl.finished || pl.inject || &pl.last.b[:1][0] != &b[0] {
		t.Errorf("after reset: Match took %d bytes, finished %v, inject %v, template buffer kept %v", n, pl.finished, pl.inject, &pl.last.b[:1][0] == &b[0])
	}
}
