package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// recordClaudeCode runs the claude binary against a capture server and writes the fixtures of
// testdata/claudecode: the request of `claude -p "say hi"`, and the second request of a session
// in which the capture server's model calls Read on a file. Each is sanitized (sanitizeClaude)
// before it is written.
func recordClaudeCode(t *testing.T) {
	bin, err := exec.LookPath("claude")
	if err != nil {
		t.Fatal("-update-claude-code needs claude on PATH")
	}
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notes, []byte("the secret word is plum\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, rc := range []struct {
		name, prompt string
		turn         int // the request kept, from 0
	}{
		{"print", "say hi", 0},
		{"tool", "read notes.txt and tell me the secret word", 1},
	} {
		c := &captureServer{readFile: notes}
		if rc.name == "print" {
			c.readFile = ""
		}
		base := serveHandler(t, c)
		runClaude(t, bin, base, t.TempDir(), dir, "sim", rc.prompt)
		reqs := c.captured()
		if len(reqs) <= rc.turn {
			t.Fatalf("%s: claude sent %d requests, want more than %d", rc.name, len(reqs), rc.turn)
		}
		f := reqs[rc.turn]
		f.Header = sanitizeHeader(f.Header)
		f.Body = sanitizeClaude(t, f.Body, rc.prompt, dir)
		b, err := json.MarshalIndent(f, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", "claudecode", rc.name+".json")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// captureServer records the requests sent to it and answers each in the Messages API's stream:
// a call of Read on readFile to a request without a tool result (when readFile is set), else
// the text "hi".
type captureServer struct {
	readFile string
	mu       sync.Mutex
	reqs     []claudeFixture
}

func (c *captureServer) captured() []claudeFixture {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]claudeFixture(nil), c.reqs...)
}

func (c *captureServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || !json.Valid(body) || r.URL.Path != "/v1/messages" {
		http.Error(w, `{"type":"error","error":{"type":"not_found_error","message":"capture server"}}`, http.StatusNotFound)
		return
	}
	c.mu.Lock()
	c.reqs = append(c.reqs, claudeFixture{Method: r.Method, URL: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body})
	c.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	ev := func(name, data string) { fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data) }
	ev("message_start", `{"type":"message_start","message":{"id":"msg_capture","type":"message","role":"assistant","model":"sim","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}`)
	stop := "end_turn"
	if c.readFile != "" && !bytes.Contains(body, []byte(`"tool_result"`)) {
		input, _ := json.Marshal(map[string]string{"file_path": c.readFile})
		partial, _ := json.Marshal(string(input))
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_capture","name":"Read","input":{}}}`)
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":`+string(partial)+`}}`)
		stop = "tool_use"
	} else {
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`)
	}
	ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
	ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"`+stop+`","stop_sequence":null},"usage":{"output_tokens":1}}`)
	ev("message_stop", `{"type":"message_stop"}`)
}

// sanitizeHeader keeps Claude Code's headers but its credential, the body's length (the body
// changes) and its session id.
func sanitizeHeader(h http.Header) http.Header {
	h = h.Clone()
	h.Del("Content-Length")
	h.Set("X-Api-Key", "test-key")
	if h.Get("X-Claude-Code-Session-Id") != "" {
		h.Set("X-Claude-Code-Session-Id", "00000000-0000-4000-8000-000000000000")
	}
	return h
}

// sanitizeClaude replaces Claude Code's own texts in a request body with placeholder text of the
// same size: the system prompt, the text blocks of its messages and system messages (but the
// user's prompt), the tools' descriptions and every description inside their input schemas.
// The user id's values become zeros, and the working directory dir becomes /project.
func sanitizeClaude(t *testing.T, body []byte, prompt, dir string) json.RawMessage {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatal(err)
	}
	m["system"] = placeholderContent(m["system"], prompt)
	if msgs, ok := m["messages"].([]any); ok {
		for _, v := range msgs {
			msg, _ := v.(map[string]any)
			msg["content"] = placeholderContent(msg["content"], prompt)
		}
	}
	if tools, ok := m["tools"].([]any); ok {
		for _, v := range tools {
			tool, _ := v.(map[string]any)
			if s, ok := tool["description"].(string); ok {
				tool["description"] = claudePlaceholder(len(s))
			}
			tool["input_schema"] = placeholderDescriptions(tool["input_schema"])
		}
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		if uid, ok := md["user_id"].(string); ok {
			var ids map[string]any
			if json.Unmarshal([]byte(uid), &ids) == nil {
				for k, v := range ids {
					if s, ok := v.(string); ok {
						ids[k] = strings.Repeat("0", len(s))
					}
				}
				b, _ := json.Marshal(ids)
				md["user_id"] = string(b)
			}
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.ReplaceAll(out, []byte(dir), []byte("/project"))
}

// placeholderContent replaces the text of a content value (a string or blocks) but the prompt's;
// tool inputs and tool results, which the test itself made, are kept.
func placeholderContent(v any, prompt string) any {
	switch c := v.(type) {
	case string:
		if c == prompt {
			return c
		}
		return claudePlaceholder(len(c))
	case []any:
		for _, b := range c {
			blk, _ := b.(map[string]any)
			if s, ok := blk["text"].(string); ok && blk["type"] == "text" && s != prompt {
				blk["text"] = claudePlaceholder(len(s))
			}
		}
	}
	return v
}

// placeholderDescriptions replaces every "description" string inside a JSON Schema.
func placeholderDescriptions(v any) any {
	switch s := v.(type) {
	case map[string]any:
		for k, x := range s {
			if str, ok := x.(string); ok && k == "description" {
				s[k] = claudePlaceholder(len(str))
				continue
			}
			s[k] = placeholderDescriptions(x)
		}
	case []any:
		for i := range s {
			s[i] = placeholderDescriptions(s[i])
		}
	}
	return v
}

// claudePlaceholder returns n bytes of placeholder text.
func claudePlaceholder(n int) string {
	const filler = "Placeholder text standing in for the client's own words. "
	return strings.Repeat(filler, n/len(filler)+1)[:n]
}
