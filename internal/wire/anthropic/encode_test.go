package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

func TestAppendString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `""`},
		{"plain", `"plain"`},
		{"q\"b\\s/", `"q\"b\\s/"`},
		{"\n\r\t\b\f", `"\n\r\t\b\f"`},
		{"\x00\x01\x1f\x7f", `"\u0000\u0001\u001f` + "\x7f" + `"`},
		{"é😀", `"é😀"`},
		{"a\u2028b\u2029c", `"a\u2028b\u2029c"`},
		{"bad\xffutf8\xc3", `"bad\ufffdutf8\ufffd"`},
		{"<html>&", `"<html>&"`},
	}
	for _, tt := range tests {
		if got := string(appendString(nil, tt.in)); got != tt.want {
			t.Errorf("appendString(%q): got %s, want %s", tt.in, got, tt.want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "hello", "\x00\u2028\xff", "é😀\"\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := appendString(nil, s)
		if !utf8.Valid(out) || !json.Valid(out) {
			t.Fatalf("appendString(%q) = %q: not valid JSON in UTF-8", s, out)
		}
		if strings.ContainsAny(string(out), "\u2028\u2029") {
			t.Fatalf("appendString(%q) = %q: unescaped line separator", s, out)
		}
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatal(err)
		}
		if want := strings.ToValidUTF8(s, "\uFFFD"); utf8.ValidString(s) && back != want {
			t.Fatalf("appendString(%q) decodes to %q, want %q", s, back, want)
		}
		// Our own scanner reads it back too.
		d := newScanner(string(out))
		got, err := d.Str()
		if err != nil || got != back {
			t.Fatalf("scanner reads %q as %q, %v; want %q", out, got, err, back)
		}
	})
}

var sampleResponse = llm.Response{
	ID:    "engine-id",
	Model: "claude-test",
	Content: []llm.Block{
		{Type: llm.BlockText, Text: "Let me check \"that\".\n"},
		{Type: llm.BlockToolUse, ID: "toolu_01", Name: "get_weather", Input: json.RawMessage(`{"city":"Paris"}`)},
	},
	Stop:  llm.StopToolUse,
	Usage: llm.Usage{InputTokens: 10, OutputTokens: 20, CacheCreationInputTokens: 3, CacheReadInputTokens: 4},
}

func TestAppendResponse(t *testing.T) {
	tests := []struct {
		name string
		r    llm.Response
		id   string
		want string
	}{
		{
			name: "text and tool use",
			r:    sampleResponse,
			id:   "msg_abc",
			want: `{"id":"msg_abc","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"Let me check \"that\".\n"},{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{"city":"Paris"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":3,"cache_read_input_tokens":4,"output_tokens":20}}`,
		},
		{
			name: "stop sequence, engine id, a broken tool input and a stray block",
			r: llm.Response{ID: "msg_engine", Model: "m", Stop: llm.StopSequence, StopSequence: "END",
				Content: []llm.Block{
					{Type: llm.BlockToolUse, ID: "toolu_2", Name: "f", Input: json.RawMessage(`{"a":`)},
					{Type: llm.BlockImage, URL: "https://x"},
				}},
			want: `{"id":"msg_engine","type":"message","role":"assistant","model":"m","content":[{"type":"tool_use","id":"toolu_2","name":"f","input":{}}],"stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`,
		},
		{
			name: "empty",
			r:    llm.Response{},
			id:   "msg_1",
			want: `{"id":"msg_1","type":"message","role":"assistant","model":"","content":[],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`,
		},
	}
	for _, tt := range tests {
		got := AppendResponse([]byte("prefix:"), &tt.r, tt.id)
		if want := "prefix:" + tt.want; string(got) != want {
			t.Errorf("%s: got\n%s\nwant\n%s", tt.name, got, want)
		}
	}
}

func TestAppendResponseAllocs(t *testing.T) {
	buf := make([]byte, 0, 4096)
	allocs := testing.AllocsPerRun(100, func() {
		buf = AppendResponse(buf[:0], &sampleResponse, "msg_abc")
	})
	if allocs != 0 {
		t.Errorf("AppendResponse into a big enough buffer: got %.1f allocs, want 0", allocs)
	}
}

func BenchmarkAppendResponse(b *testing.B) {
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendResponse(buf[:0], &sampleResponse, "msg_abc")
	}
}

func TestAppendError(t *testing.T) {
	tests := []struct {
		e     *apierr.Error
		reqID string
		want  string
	}{
		{apierr.Invalid("max_tokens", "field required"), "L0-1",
			`{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: field required"},"request_id":"L0-1"}`},
		{apierr.New(apierr.Authentication, "invalid x-api-key"), "L0-2",
			`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"L0-2"}`},
		{apierr.New(apierr.Permission, "no"), "", `{"type":"error","error":{"type":"permission_error","message":"no"}}`},
		{apierr.New(apierr.NotFound, "model: \"x\" not found"), "r",
			`{"type":"error","error":{"type":"not_found_error","message":"model: \"x\" not found"},"request_id":"r"}`},
		{apierr.New(apierr.RequestTooLarge, "big"), "", `{"type":"error","error":{"type":"request_too_large","message":"big"}}`},
		{apierr.New(apierr.RateLimit, "slow"), "", `{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}`},
		{apierr.New(apierr.Timeout, "late"), "", `{"type":"error","error":{"type":"timeout_error","message":"late"}}`},
		{apierr.New(apierr.Overloaded, "busy"), "", `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`},
		{apierr.Wrap(apierr.BadGateway, errors.New("secret cause"), "engine failed"), "",
			`{"type":"error","error":{"type":"api_error","message":"engine failed"}}`},
		{nil, "r", `{"type":"error","error":{"type":"api_error","message":"internal error"},"request_id":"r"}`},
	}
	for _, tt := range tests {
		if got := string(AppendError(nil, tt.e, tt.reqID)); got != tt.want {
			t.Errorf("AppendError(%v): got\n%s\nwant\n%s", tt.e, got, tt.want)
		}
	}
}

func TestAppendCountTokens(t *testing.T) {
	if got, want := string(AppendCountTokens(nil, 1234)), `{"input_tokens":1234}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestAppendModel(t *testing.T) {
	m := Model{ID: "claude-test", DisplayName: "Claude Test", Created: time.Date(2025, 2, 19, 1, 2, 3, 0, time.FixedZone("x", 3600))}
	want := `{"type":"model","id":"claude-test","display_name":"Claude Test","created_at":"2025-02-19T00:02:03Z"}`
	if got := string(AppendModel(nil, m)); got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// modelPage is the decoded shape of a model list page.
type modelPage struct {
	Data []struct {
		ID string `json:"id"`
	} `json:"data"`
	HasMore bool    `json:"has_more"`
	FirstID *string `json:"first_id"`
	LastID  *string `json:"last_id"`
}

func (p modelPage) summary() string {
	ids := make([]string, len(p.Data))
	for i, d := range p.Data {
		ids[i] = d.ID
	}
	deref := func(s *string) string {
		if s == nil {
			return "null"
		}
		return *s
	}
	return fmt.Sprintf("%s more=%t first=%s last=%s", strings.Join(ids, ","), p.HasMore, deref(p.FirstID), deref(p.LastID))
}

func TestAppendModelList(t *testing.T) {
	var all []Model
	for i := range 25 {
		all = append(all, Model{ID: fmt.Sprintf("m%02d", i), DisplayName: "M", Created: time.Unix(int64(i), 0)})
	}
	ids := func(from, to int) string {
		var s []string
		for i := from; i < to; i++ {
			s = append(s, fmt.Sprintf("m%02d", i))
		}
		return strings.Join(s, ",")
	}
	tests := []struct {
		query   string
		models  []Model
		want    string
		wantErr string
	}{
		{query: "", models: all, want: ids(0, 20) + " more=true first=m00 last=m19"},
		{query: "limit=3", models: all, want: "m00,m01,m02 more=true first=m00 last=m02"},
		{query: "limit=3&after_id=m02", models: all, want: "m03,m04,m05 more=true first=m03 last=m05"},
		{query: "limit=10&after_id=m20", models: all, want: "m21,m22,m23,m24 more=false first=m21 last=m24"},
		{query: "after_id=m24", models: all, want: " more=false first=null last=null"},
		{query: "limit=3&before_id=m10", models: all, want: "m07,m08,m09 more=true first=m07 last=m09"},
		{query: "limit=5&before_id=m03", models: all, want: "m00,m01,m02 more=false first=m00 last=m02"},
		{query: "limit=1000", models: all, want: ids(0, 25) + " more=false first=m00 last=m24"},
		{query: "", models: nil, want: " more=false first=null last=null"},
		{query: "limit=0", models: all, wantErr: `limit: must be an integer between 1 and 1000, got "0"`},
		{query: "limit=1001", models: all, wantErr: `limit: must be an integer between 1 and 1000, got "1001"`},
		{query: "limit=ten", models: all, wantErr: `limit: must be an integer between 1 and 1000, got "ten"`},
		{query: "limit=", models: all, wantErr: `limit: must be an integer between 1 and 1000, got ""`},
		{query: "after_id=nope", models: all, wantErr: `after_id: no model with id "nope"`},
		{query: "before_id=nope", models: all, wantErr: `before_id: no model with id "nope"`},
		{query: "after_id=m01&before_id=m05", models: all, wantErr: "before_id: cannot be used together with after_id"},
	}
	for _, tt := range tests {
		q, err := url.ParseQuery(tt.query)
		if err != nil {
			t.Fatal(err)
		}
		out, err := AppendModelList([]byte("x"), tt.models, q)
		if tt.wantErr != "" {
			var e *apierr.Error
			if !errors.As(err, &e) || e.Status() != 400 || e.Message != tt.wantErr {
				t.Errorf("%q: got error %v, want 400 %q", tt.query, err, tt.wantErr)
			}
			if string(out) != "x" {
				t.Errorf("%q: got output %q on error, want dst unchanged", tt.query, out)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: got error %v, want none", tt.query, err)
			continue
		}
		var page modelPage
		if err := json.Unmarshal(out[1:], &page); err != nil {
			t.Fatalf("%q: %v in %s", tt.query, err, out)
		}
		if got := page.summary(); got != tt.want {
			t.Errorf("%q: got %s, want %s", tt.query, got, tt.want)
		}
	}
}

// TestAppendRequest pins the wire form AppendRequest writes for the upstream.
func TestAppendRequest(t *testing.T) {
	r := &llm.Request{
		Model:     "claude-up",
		MaxTokens: 100,
		System:    []llm.Block{text("a"), text("b")},
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: []llm.Block{text("hi")}},
			{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockToolUse, ID: "toolu_1", Name: "f"}}},
			{Role: llm.RoleUser, Content: []llm.Block{
				{Type: llm.BlockToolResult, ToolUseID: "toolu_1", IsError: true, Content: []llm.Block{text("boom")}},
				{Type: llm.BlockImage, MediaType: "image/png", Data: "AAAA"},
			}},
		},
		Temperature:   f64(0.25),
		TopK:          intp(5),
		StopSequences: []string{"X"},
		Tools:         []llm.Tool{{Name: "f", Description: "does f", InputSchema: json.RawMessage(`{"type":"object"}`)}},
		ToolChoice:    llm.ToolChoice{Type: llm.ToolAny, DisableParallelToolUse: true},
		UserID:        "u1",
		Stream:        true,
	}
	want := `{"model":"claude-up","max_tokens":100,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"boom","is_error":true},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]}],"system":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"temperature":0.25,"top_k":5,"stop_sequences":["X"],"tools":[{"name":"f","description":"does f","input_schema":{"type":"object"}}],"tool_choice":{"type":"any","disable_parallel_tool_use":true},"metadata":{"user_id":"u1"},"stream":true}`
	got := AppendRequest(nil, r)
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	back, err := DecodeRequest(got)
	if err != nil {
		t.Fatal(err)
	}
	r.Messages[1].Content[0].Input = json.RawMessage(`{}`) // a missing input is sent as {}
	if diff := cmp.Diff(r, back); diff != "" {
		t.Errorf("round trip mismatch (-want +got):\n%s", diff)
	}
}
