package openai

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

// recordSink records every event and flush as a line of text.
type recordSink struct{ log []string }

func (s *recordSink) Send(ev *llm.Event) error {
	s.log = append(s.log, fmt.Sprintf("%+v", *ev))
	return nil
}

func (s *recordSink) Flush() error { s.log = append(s.log, "flush"); return nil }

// readBoth reads body with ReadStream and with every chunk decoded by encoding/json (readStream's
// decodeAll, the reading before jsontext) and fails unless both send the same
// events and flushes and end the same way. A generated tool call id differs from run to run, so
// ids of that form are blanked.
func readBoth(t *testing.T, body []byte, oneByte bool) {
	t.Helper()
	reader := func() *bytes.Reader { return bytes.NewReader(body) }
	var got, want recordSink
	var gotErr, wantErr error
	if oneByte {
		gotErr = ReadStream(iotest.OneByteReader(reader()), &got)
		wantErr = readStream(iotest.OneByteReader(reader()), &want, true)
	} else {
		gotErr = ReadStream(reader(), &got)
		wantErr = readStream(reader(), &want, true)
	}
	if d := cmp.Diff(errString(wantErr), errString(gotErr)); d != "" {
		t.Fatalf("%q (one byte a read: %v): errors differ (-legacy +new):\n%s", body, oneByte, d)
	}
	if d := cmp.Diff(blankIDs(want.log), blankIDs(got.log)); d != "" {
		t.Fatalf("%q (one byte a read: %v): events differ (-legacy +new):\n%s", body, oneByte, d)
	}
}

// errString describes err as far as a caller can tell errors apart.
func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	s := err.Error()
	s += fmt.Sprintf(" truncated=%v arguments=%v", errors.Is(err, ErrTruncated), errors.Is(err, ErrToolArguments))
	var e *apierr.Error
	if errors.As(err, &e) {
		s += fmt.Sprintf(" kind=%v message=%q code=%q limit=%q engine=%v", e.Kind, e.Message, e.Code, e.Limit, errors.Is(err, apierr.ErrEngineSaid))
	}
	return s
}

// blankIDs replaces the ids ids.ToolUse generates, which differ from run to run.
func blankIDs(log []string) []string {
	out := make([]string, len(log))
	for i, l := range log {
		if j := strings.Index(l, "ID:toolu_"); j >= 0 && strings.Contains(l, "Block:tool_use") {
			if k := strings.IndexByte(l[j:], ' '); k > 0 && len(l[j+len("ID:toolu_"):j+k]) == 24 {
				l = l[:j] + "ID:toolu_*" + l[j+k:]
			}
		}
		out[i] = l
	}
	return out
}

// diffSeeds are streams for FuzzReadStreamLegacy and TestReadStreamLegacy: the fixtures, and
// chunks of the shapes the scanner hands over to encoding/json.
func diffSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	files, err := filepath.Glob(filepath.Join("testdata", "*.sse"))
	if err != nil || len(files) == 0 {
		t.Fatalf("fixtures: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	seeds = append(seeds, vllmStream(5))
	// Heads that begin like the last chunk's and go on differently.
	seeds = append(seeds, []byte(`data: {"id":"a","created":17,"choices":[{"index":0,"delta":{"content":"x"}}]}

data: {"id":"a","created":1735,"choices":[{"index":0,"delta":{"content":"y"}}]}

data: {"id":"a","created":17,"id":"b","choices":[{"index":0,"delta":{"content":"z"}}]}

data: {"id":"a","created":17}

data: {"id":"a","created":17,"error":{"message":"late"},"choices":[]}

data: [DONE]

`))
	// Chunks around a text delta's template: texts it takes and texts it leaves to the scanner.
	seeds = append(seeds, []byte("data: {\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n"+
		"data: {\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\u00e9t\u00e9\"}}]}\n\n"+
		"data: {\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\xff\"}}]}\n\n"+
		"data: {\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\\\"b\"}}]}\n\n"+
		"data: {\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"}}]}\n\n"+
		"data: {\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"b\":{\"content\":\"c\"}}]}\n\n"+
		"data: {\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"y\"},\"finish_reason\":\"stop\"}]}\n\n"+
		"data: [DONE]\n\n"))
	for _, c := range []string{
		`{"id":"chatcmpl-a","model":"m","choices":[{"index":0,"delta":{"content":"hi \"there\"\n\u00e9\ud83d\ude00"}}]}`,
		`{"ID":"chatcmpl-a","Model":"m","choices":[{"Index":1,"delta":{"Content":"x"}}]}`,
		`{"id":"a","id":"b","choices":[{"index":0,"delta":{"content":"a"},"delta":{"refusal":"b"}}]}`,
		`{"id":"a","choices":[null,{"index":0,"delta":null,"message":{"content":"m"}}],"usage":{}}`,
		`{"id":"a","choices":[{"index":0,"delta":{"tool_calls":[null,{"index":null,"id":"call_1","function":{"name":"f","arguments":"{}"}}]}}]}`,
		`{"id":"a","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":"}},{"index":1,"function":{"name":"g"}}]}}]}`,
		`{"id":"a","choices":[{"index":1e0,"delta":{"content":"x"}}]}`,
		`{"id":"a","choices":[{"index":0,"delta":{"content":5}}]}`,
		`{"id":"a","choices":[{"index":0,"finish_reason":"stop","stop_reason":128009}]}`,
		`{"id":"a","choices":[{"index":0,"finish_reason":"length","stop_reason":"\u0041"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":4}}}`,
		`{"error":{"message":"boom","type":"server_error","code":503}}`,
		`{"object":"error","message":"bad","type":"BadRequestError","code":400}`,
		`{"error":null,"object":"chat.completion.chunk","id":"a","choices":[]}`,
		`{"\u0069d":"x","choices":[{"index":0,"delta":{"content":"y"}}]}`,
		"{\"id\":\"a\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\xff\"}}]}",
		`{"id":"a","choices":[{"index":0,"delta":{"content":"x"}}]} trailing`,
		`null`, `[]`, `{"id":"a","choices":{}}`, `{"id":"a","choices":[{"index":-0,"delta":{"content":"z"}}]}`,
		`{"id":"a","choices":[{"index":0,"finish_reason":"tool_calls","delta":{"tool_calls":[{"index":0,"function":{"arguments":"[1]"}}]}}]}`,
		`{"id":"a","choices":[{"index":0,"delta":{"content":"x"},"finiſh_reason":"stop"}]}`,
	} {
		seeds = append(seeds, []byte("data: "+c+"\n\ndata: {\"choices\":[{\"index\":0,\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"))
	}
	return seeds
}

// TestReadStreamLegacy holds ReadStream to the encoding/json reading on the seeds of the fuzz target.
func TestReadStreamLegacy(t *testing.T) {
	for _, b := range diffSeeds(t) {
		readBoth(t, b, false)
		readBoth(t, b, true)
	}
}

// FuzzReadStreamLegacy checks that ReadStream, which reads chunks with jsontext, does what it
// did when it decoded them with encoding/json (readStream with decodeAll): the same events and flushes,
// the same error. The stream is read whole and one byte a read, so that a string an event kept
// from the reader's buffer, overwritten by the next read, shows.
func FuzzReadStreamLegacy(f *testing.F) {
	for _, b := range diffSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		readBoth(t, body, false)
		readBoth(t, body, true)
	})
}

// nopSink takes events and keeps none.
type nopSink struct{}

func (nopSink) Send(*llm.Event) error { return nil }
func (nopSink) Flush() error          { return nil }

// TestReadStreamAllocs: a text stream costs an allocation per token (its text) and a few per
// stream, not encoding/json's fifteen a chunk.
func TestReadStreamAllocs(t *testing.T) {
	data := vllmStream(100)
	r := bytes.NewReader(data)
	allocs := testing.AllocsPerRun(20, func() {
		r.Reset(data)
		if err := ReadStream(r, nopSink{}); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 100+20 {
		t.Errorf("a 100-token stream cost %.0f allocations, want at most 120", allocs)
	}
}

// TestScanChunkShapes: the chunks engines send are read by the scanner, not handed over to
// encoding/json, and a stream's second chunk is read after the head it shares with the first.
func TestScanChunkShapes(t *testing.T) {
	for _, c := range []string{
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1735689600,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":null,"content":"x","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}`,
		`{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"x"}}],"created":1,"id":"chatcmpl-1","model":"m","system_fingerprint":"b1","object":"chat.completion.chunk"}`,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt","service_tier":"default","system_fingerprint":"fp","choices":[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"abc"}`,
		`{"id":"1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":null}]}`,
		`{"id":"1","choices":[],"usage":{"prompt_tokens":21,"total_tokens":24,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":16}}}`,
	} {
		var v chunkView
		var m chunkMemo
		if !scanChunk([]byte(c), &v, true, &m) {
			t.Errorf("%s: handed over to encoding/json", c)
		}
	}
	var v chunkView
	var p chunkPrefix
	first := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"}}]}`)
	var m chunkMemo
	if !scanChunk(first, &v, false, &m) || len(m.text.b) == 0 {
		t.Fatal("a text delta left no template")
	}
	next := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"été"}}]}`)
	if text, ok := m.text.match(next); !ok || string(text) != "été" {
		t.Errorf("the next text delta does not fit the template: %q %v", text, ok)
	}
	if !scanWhole(first, &v, true, &p) || string(p.b) != `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m"` || p.n != 4 {
		t.Fatalf("head %q of %d members", p.b, p.n)
	}
	second := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"b"}}]}`)
	// Spoil the head's bytes in the prefix: read after the head, the chunk still reads.
	p.b = append(p.b[:0], second[:len(p.b)]...)
	v.reset()
	if !scanWhole(second, &v, false, &p) || len(v.choices) != 1 || v.choices[0].delta.content != "b" || v.id != "" {
		t.Errorf("second chunk: %+v", v)
	}
}
