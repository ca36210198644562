package binary

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/vocab"
)

// The test vectors of docs/protocol.md live in testdata/binary/vectors.json at the repository
// root, where every client implementation reads them. They are written from the definitions in
// vectors_request_test.go and vectors_stream_test.go (built of the parts of
// vectors_parts_test.go) with `go test ./internal/wire/binary -run TestVectors -update`;
// without -update the test checks the file matches, byte for byte.
var update = flag.Bool("update", false, "rewrite testdata/binary/vectors.json and the golden files")

const vectorsPath = "../../../testdata/binary/vectors.json"

// vectorFile is testdata/binary/vectors.json.
type vectorFile struct {
	Comment         string        `json:"comment"`
	Vocab           vectorVocab   `json:"vocab"`
	Requests        []jsonRequest `json:"requests"`
	InvalidRequests []jsonInvalid `json:"invalid_requests"`
	Streams         []jsonStream  `json:"streams"`
}

type vectorVocab struct {
	Hash    string `json:"hash"`
	Entries int    `json:"entries"`
	File    string `json:"file"`
}

type jsonRequest struct {
	Name    string            `json:"name"`
	Version Version           `json:"version"`
	Output  string            `json:"output"`
	Headers map[string]string `json:"headers"`
	Hex     string            `json:"hex"`
	Parts   []part            `json:"parts"`
	Request json.RawMessage   `json:"request"`
}

type jsonInvalid struct {
	Name    string            `json:"name"`
	Version Version           `json:"version"`
	Headers map[string]string `json:"headers"`
	Hex     string            `json:"hex"`
	Parts   []part            `json:"parts"`
	Field   string            `json:"field"`
	Error   string            `json:"error"`
}

type jsonStream struct {
	Name    string       `json:"name"`
	Version Version      `json:"version"`
	Output  string       `json:"output"`
	Hex     string       `json:"hex"`
	Parts   []part       `json:"parts"`
	Expect  streamExpect `json:"expect"`
}

func output(m Mode) string {
	if m.Text {
		return "text"
	}
	return "tokens"
}

// requestShape is the request in the Anthropic-like JSON shape the JavaScript client encodes.
// JSON values (tool inputs, schemas) stay raw, so their key order survives into the file and a
// client that re-serializes them produces the vector's bytes.
func requestShape(r *llm.Request) map[string]any {
	var block func(b llm.Block) map[string]any
	block = func(b llm.Block) map[string]any {
		switch b.Type {
		case llm.BlockImage:
			if b.URL != "" {
				return map[string]any{"type": "image", "source": map[string]any{"type": "url", "url": b.URL}}
			}
			return map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": b.MediaType, "data": b.Data}}
		case llm.BlockToolUse:
			return map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": b.Input}
		case llm.BlockToolResult:
			m := map[string]any{"type": "tool_result", "tool_use_id": b.ToolUseID, "is_error": b.IsError}
			var c []any
			for _, x := range b.Content {
				c = append(c, block(x))
			}
			m["content"] = c
			return m
		}
		return map[string]any{"type": "text", "text": b.Text}
	}
	m := map[string]any{"model": r.Model, "max_tokens": r.MaxTokens}
	if len(r.System) > 0 {
		var s []any
		for _, b := range r.System {
			s = append(s, b.Text)
		}
		m["system"] = s
	}
	var msgs []any
	for _, msg := range r.Messages {
		var c []any
		for _, b := range msg.Content {
			c = append(c, block(b))
		}
		msgs = append(msgs, map[string]any{"role": msg.Role.String(), "content": c})
	}
	m["messages"] = msgs
	if r.Temperature != nil {
		m["temperature"] = *r.Temperature
	}
	if r.TopP != nil {
		m["top_p"] = *r.TopP
	}
	if r.TopK != nil {
		m["top_k"] = *r.TopK
	}
	if len(r.StopSequences) > 0 {
		m["stop_sequences"] = r.StopSequences
	}
	if len(r.Tools) > 0 {
		var ts []any
		for _, t := range r.Tools {
			ts = append(ts, map[string]any{"name": t.Name, "description": t.Description, "input_schema": t.InputSchema})
		}
		m["tools"] = ts
	}
	if tc := r.ToolChoice; tc != (llm.ToolChoice{}) {
		types := []string{"auto", "any", "tool", "none"}
		c := map[string]any{"type": types[tc.Type], "disable_parallel_tool_use": tc.DisableParallelToolUse}
		if tc.Type == llm.ToolNamed {
			c["name"] = tc.Name
		}
		m["tool_choice"] = c
	}
	if r.UserID != "" {
		m["metadata"] = map[string]any{"user_id": r.UserID}
	}
	return m
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func header(m map[string]string) http.Header {
	h := http.Header{}
	for k, v := range m {
		h.Set(k, v)
	}
	return h
}

// runScript writes a stream script through a StreamWriter, returning the bytes and the number
// of writes.
func runScript(t testing.TB, mode Mode, script []streamStep) ([]byte, int) {
	t.Helper()
	var out bytes.Buffer
	writes := 0
	sw, err := NewStreamWriter(&out, func() error { writes++; return nil }, mode, vocab.Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range script {
		switch {
		case st.ev != nil:
			err = sw.Send(st.ev)
		case st.flush:
			err = sw.Flush()
		case st.err != nil:
			err = sw.WriteError(st.err)
		}
		if err != nil {
			t.Fatalf("script: %v", err)
		}
	}
	return out.Bytes(), writes
}

// collect reads a stream the way a Go client does and returns what it got.
func collect(t testing.TB, mode Mode, r io.Reader) streamExpect {
	t.Helper()
	var c llm.Collector
	err := ReadStream(r, mode, vocab.Default(), &c)
	got := expectOf(&c.Response)
	if err != nil {
		var e *apierr.Error
		if !errors.As(err, &e) {
			t.Fatalf("ReadStream: %v", err)
		}
		got.Usage, got.StopReason = nil, ""
		got.Error = &expectError{Status: e.Status(), Type: e.Kind.AnthropicType(), Code: e.Code, Message: e.Message}
	}
	return got
}

func expectOf(r *llm.Response) streamExpect {
	e := streamExpect{ID: r.ID, Model: r.Model, StopReason: r.Stop.String(), StopSequence: r.StopSequence,
		Usage: &expectUsage{InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens,
			CacheCreationInputTokens: r.Usage.CacheCreationInputTokens, CacheReadInputTokens: r.Usage.CacheReadInputTokens}}
	for _, b := range r.Content {
		switch b.Type {
		case llm.BlockToolUse:
			e.Content = append(e.Content, expectBlock{Type: "tool_use", ID: b.ID, Name: b.Name, Input: string(b.Input)})
		default:
			e.Content = append(e.Content, expectBlock{Type: "text", Text: b.Text})
		}
	}
	return e
}

// fixRatio fills the cache hit ratio a Go collector does not keep: version 1 sends it, version 2
// derives it from the counts.
func fixRatio(got *streamExpect, want streamExpect) {
	if got.Usage != nil && want.Usage != nil {
		got.Usage.CacheHitRatio = want.Usage.CacheHitRatio
	}
}

func TestVectors(t *testing.T) {
	file := vectorFile{
		Comment: "Test vectors of the layer0 binary protocol (docs/protocol.md). Generated by " +
			"`go test ./internal/wire/binary -run TestVectors -update`; every client implementation in the " +
			"repository checks against them. hex is the concatenation of parts.",
		Vocab: vectorVocab{Hash: vocab.Default().Hash(), Entries: vocab.Default().Len(), File: "internal/vocab/cl100k_65536.vocab"},
	}
	golden := map[string]string{}
	if !*update {
		var old vectorFile
		b, err := os.ReadFile(vectorsPath)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if err := json.Unmarshal(b, &old); err != nil {
			t.Fatal(err)
		}
		for _, v := range old.InvalidRequests {
			golden[v.Name] = v.Error
		}
	}

	for _, v := range requestVectors() {
		body := joined(v.parts)
		t.Run("request/"+v.name, func(t *testing.T) {
			got, mode, err := DecodeRequest(body, header(v.header))
			if err != nil {
				t.Fatalf("DecodeRequest: %v", err)
			}
			want := *v.want
			want.Format, want.Stream = llm.FormatBinary, true
			if diff := cmp.Diff(&want, got); diff != "" {
				t.Errorf("decoded request (-want +got):\n%s", diff)
			}
			if mode != v.mode {
				t.Errorf("mode = %+v, want %+v", mode, v.mode)
			}
			enc, err := AppendRequest(nil, v.want, v.mode)
			if err != nil {
				t.Fatalf("AppendRequest: %v", err)
			}
			if !bytes.Equal(enc, body) {
				t.Errorf("AppendRequest:\n got % x\nwant % x", enc, body)
			}
		})
		file.Requests = append(file.Requests, jsonRequest{Name: v.name, Version: v.mode.Version, Output: output(v.mode),
			Headers: v.header, Hex: hex.EncodeToString(body), Parts: v.parts, Request: mustJSON(t, requestShape(v.want))})
	}

	for _, v := range invalidVectors() {
		body := joined(v.parts)
		_, _, err := DecodeRequest(body, header(v.header))
		var e *apierr.Error
		if !errors.As(err, &e) {
			t.Fatalf("invalid/%s: DecodeRequest error = %v, want *apierr.Error", v.name, err)
		}
		if e.Status() != http.StatusBadRequest || e.Code != ErrorCode || e.Param != v.field {
			t.Errorf("invalid/%s: got status %d code %q param %q, want 400 %q %q", v.name, e.Status(), e.Code, e.Param, ErrorCode, v.field)
		}
		if !*update && e.Message != golden[v.name] {
			t.Errorf("invalid/%s: message %q, want %q", v.name, e.Message, golden[v.name])
		}
		file.InvalidRequests = append(file.InvalidRequests, jsonInvalid{Name: v.name, Version: v.version, Headers: v.header,
			Hex: hex.EncodeToString(body), Parts: v.parts, Field: v.field, Error: e.Message})
	}

	for _, v := range streamVectors() {
		stream := joined(v.parts)
		t.Run("stream/"+v.name, func(t *testing.T) {
			if v.script != nil {
				got, _ := runScript(t, v.mode, v.script)
				if !bytes.Equal(got, stream) {
					t.Errorf("StreamWriter output:\n got % x\nwant % x", got, stream)
				}
			}
			got := collect(t, v.mode, bytes.NewReader(stream))
			fixRatio(&got, v.expect)
			if diff := cmp.Diff(v.expect, got); diff != "" {
				t.Errorf("decoded stream (-want +got):\n%s", diff)
			}
		})
		file.Streams = append(file.Streams, jsonStream{Name: v.name, Version: v.mode.Version, Output: output(v.mode),
			Hex: hex.EncodeToString(stream), Parts: v.parts, Expect: v.expect})
	}

	b, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	if *update {
		if err := os.MkdirAll(filepath.Dir(vectorsPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(vectorsPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	old, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(old, b) {
		t.Errorf("%s is out of date: run go test ./internal/wire/binary -run TestVectors -update and review the diff", vectorsPath)
	}
}
