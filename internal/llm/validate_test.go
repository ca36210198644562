package llm

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/apierr"
)

// valid returns a request that passes Validate and uses every field.
func valid() *Request {
	temp, topP, topK := 0.7, 0.9, 40
	return &Request{
		Model:     "m",
		System:    []Block{{Type: BlockText, Text: "Be brief."}},
		MaxTokens: 100,
		Messages: []Message{
			{Role: RoleUser, Content: []Block{{Type: BlockText, Text: "Weather?"}, {Type: BlockImage, MediaType: "image/png", Data: "iVBO"}}},
			{Role: RoleAssistant, Content: []Block{{Type: BlockToolUse, ID: "toolu_1", Name: "get_weather", Input: json.RawMessage(`{"city":"Lyon"}`)}}},
			{Role: RoleUser, Content: []Block{{Type: BlockToolResult, ToolUseID: "toolu_1", Content: []Block{
				{Type: BlockText, Text: "18C"}, {Type: BlockImage, URL: "https://example.com/a.png"}}}}},
			{Role: RoleAssistant},
		},
		Temperature:   &temp,
		TopP:          &topP,
		TopK:          &topK,
		StopSequences: []string{"END"},
		Tools:         []Tool{{Name: "get_weather", Description: "Weather.", InputSchema: json.RawMessage(` {"type":"object"}`)}},
		ToolChoice:    ToolChoice{Type: ToolNamed, Name: "get_weather"},
		UserID:        "u-1",
	}
}

func TestValidate(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	k := func(v int) *int { return &v }
	tests := []struct {
		name   string
		edit   func(r *Request)
		count  bool   // ValidateCount instead of Validate
		param  string // "" when valid
		substr string // in the message
	}{
		{name: "valid", edit: func(r *Request) {}},
		{name: "no model", edit: func(r *Request) { r.Model = "" }, param: "model"},
		{name: "model not UTF-8", edit: func(r *Request) { r.Model = "m\xff" }, param: "model", substr: "UTF-8"},
		{name: "max_tokens negative", edit: func(r *Request) { r.MaxTokens = -5 }, param: "max_tokens", substr: "at least 1, got -5"},
		{name: "max_tokens zero", edit: func(r *Request) { r.MaxTokens = 0 }, param: "max_tokens"},
		{name: "max_tokens above int32", edit: func(r *Request) { r.MaxTokens = math.MaxInt32 + 1 }, param: "max_tokens", substr: "at most 2147483647"},
		{name: "max_tokens int32", edit: func(r *Request) { r.MaxTokens = math.MaxInt32 }},
		{name: "max_tokens zero in OpenAI's format", edit: func(r *Request) { r.MaxTokens, r.Format = 0, FormatOpenAI }},
		{name: "max_tokens negative in OpenAI's format", edit: func(r *Request) { r.MaxTokens, r.Format = -1, FormatOpenAI }, param: "max_tokens"},
		{name: "max_tokens zero for a count", edit: func(r *Request) { r.MaxTokens = 0 }, count: true},
		{name: "max_tokens negative for a count", edit: func(r *Request) { r.MaxTokens = -1 }, count: true, param: "max_tokens"},
		{name: "no messages", edit: func(r *Request) { r.Messages = nil }, param: "messages"},
		{name: "bad role", edit: func(r *Request) { r.Messages[0].Role = 7 }, param: "messages.0.role", substr: "role 7"},
		{name: "empty user message", edit: func(r *Request) { r.Messages[0].Content = nil }, param: "messages.0.content", substr: "non-empty content"},
		{name: "empty assistant message not last", edit: func(r *Request) { r.Messages[1].Content = nil }, param: "messages.1.content"},
		{name: "empty final user message", edit: func(r *Request) { r.Messages[3].Role = RoleUser }, param: "messages.3.content"},
		{name: "empty text block", edit: func(r *Request) { r.Messages[0].Content[0].Text = "" }, param: "messages.0.content.0.text", substr: "must be non-empty"},
		{name: "text not UTF-8", edit: func(r *Request) { r.Messages[0].Content[0].Text = "a\xc3" }, param: "messages.0.content.0.text", substr: "UTF-8"},
		{name: "image without data", edit: func(r *Request) { r.Messages[0].Content[1].Data = "" }, param: "messages.0.content.1.source"},
		{name: "image URL not UTF-8", edit: func(r *Request) { r.Messages[0].Content[1] = Block{Type: BlockImage, URL: "https://\xff"} }, param: "messages.0.content.1.source.url"},
		{name: "image URL file:", edit: func(r *Request) { r.Messages[0].Content[1] = Block{Type: BlockImage, URL: "file:///etc/passwd"} },
			param: "messages.0.content.1.source.url", substr: "must be an http or https URL"},
		{name: "image URL http", edit: func(r *Request) { r.Messages[0].Content[1] = Block{Type: BlockImage, URL: "http://example.com/a.png"} }},
		{name: "tool_result image URL gopher:", edit: func(r *Request) { r.Messages[2].Content[0].Content[1].URL = "gopher://localhost:6379/_INFO" },
			param: "messages.2.content.0.content.1.source.url", substr: "must be an http or https URL"},
		{name: "image data not base64", edit: func(r *Request) { r.Messages[0].Content[1].Data = "!!!!" },
			param: "messages.0.content.1.source.data", substr: "must be non-empty base64 (standard alphabet, padded)"},
		{name: "image data unpadded", edit: func(r *Request) { r.Messages[0].Content[1].Data = "aGVsbG8" }, param: "messages.0.content.1.source.data"},
		{name: "image data padded", edit: func(r *Request) { r.Messages[0].Content[1].Data = "aGVsbG8=" }},
		{name: "image media type", edit: func(r *Request) { r.Messages[0].Content[1].MediaType = "image/svg+xml" },
			param: "messages.0.content.1.source.media_type", substr: `must be one of image/jpeg, image/png, image/gif, image/webp, got "image/svg+xml"`},
		{name: "image URL beside bad data", edit: func(r *Request) {
			r.Messages[0].Content[1].URL = "https://example.com/a.png"
			r.Messages[0].Content[1].Data = "!!!!"
		},
			param: "messages.0.content.1.source.data"},
		{name: "unknown block type", edit: func(r *Request) { r.Messages[0].Content[0].Type = 9 }, param: "messages.0.content.0.type"},
		{name: "tool_use in a user message", edit: func(r *Request) { r.Messages[1].Role = RoleUser }, param: "messages.1.content.0", substr: "only allowed in assistant"},
		{name: "tool_use without id", edit: func(r *Request) { r.Messages[1].Content[0].ID = "" }, param: "messages.1.content.0.id"},
		{name: "tool_use without name", edit: func(r *Request) { r.Messages[1].Content[0].Name = "" }, param: "messages.1.content.0.name"},
		{name: "tool_use input not an object", edit: func(r *Request) { r.Messages[1].Content[0].Input = json.RawMessage(`[1]`) }, param: "messages.1.content.0.input"},
		{name: "tool_use input not JSON", edit: func(r *Request) { r.Messages[1].Content[0].Input = json.RawMessage(`{"a":}`) }, param: "messages.1.content.0.input"},
		{name: "tool_use input empty", edit: func(r *Request) { r.Messages[1].Content[0].Input = nil }},
		{name: "tool_result in an assistant message", edit: func(r *Request) { r.Messages[2].Role = RoleAssistant }, param: "messages.2.content.0", substr: "only allowed in user"},
		{name: "tool_result without id", edit: func(r *Request) { r.Messages[2].Content[0].ToolUseID = "" }, param: "messages.2.content.0.tool_use_id"},
		{name: "tool_result empty text", edit: func(r *Request) { r.Messages[2].Content[0].Content[0].Text = "" }, param: "messages.2.content.0.content.0.text"},
		{name: "tool_result nested tool_use", edit: func(r *Request) { r.Messages[2].Content[0].Content[1] = Block{Type: BlockToolUse, ID: "x", Name: "y"} },
			param: "messages.2.content.0.content.1.type"},
		{name: "system not text", edit: func(r *Request) { r.System[0].Type = BlockImage }, param: "system.0.type"},
		{name: "system empty", edit: func(r *Request) { r.System[0].Text = "" }, param: "system.0.text"},
		{name: "temperature 7", edit: func(r *Request) { r.Temperature = f(7) }, param: "temperature", substr: "between 0 and 1, got 7"},
		{name: "temperature negative", edit: func(r *Request) { r.Temperature = f(-0.1) }, param: "temperature"},
		{name: "temperature NaN", edit: func(r *Request) { r.Temperature = f(math.NaN()) }, param: "temperature"},
		{name: "temperature 1.5 in OpenAI's format", edit: func(r *Request) { r.Temperature, r.Format = f(1.5), FormatOpenAI }},
		{name: "temperature 2.5 in OpenAI's format", edit: func(r *Request) { r.Temperature, r.Format = f(2.5), FormatOpenAI }, param: "temperature", substr: "between 0 and 2"},
		{name: "temperature 1.5 in binary", edit: func(r *Request) { r.Temperature, r.Format = f(1.5), FormatBinary }, param: "temperature"},
		{name: "top_p 1.01", edit: func(r *Request) { r.TopP = f(1.01) }, param: "top_p"},
		{name: "top_p infinite", edit: func(r *Request) { r.TopP = f(math.Inf(1)) }, param: "top_p"},
		{name: "top_k negative", edit: func(r *Request) { r.TopK = k(-1) }, param: "top_k"},
		{name: "top_k zero", edit: func(r *Request) { r.TopK = k(0) }},
		{name: "empty stop sequence", edit: func(r *Request) { r.StopSequences = []string{"a", ""} }, param: "stop_sequences.1"},
		{name: "stop sequence not UTF-8", edit: func(r *Request) { r.StopSequences = []string{"\xfe"} }, param: "stop_sequences.0"},
		{name: "tool without name", edit: func(r *Request) { r.Tools[0].Name = "" }, param: "tools.0.name"},
		{name: "tool name with a dot", edit: func(r *Request) { r.Tools[0].Name = "a.b" }, param: "tools.0.name"},
		{name: "tool name too long", edit: func(r *Request) { r.Tools[0].Name = strings.Repeat("a", 129) }, param: "tools.0.name"},
		{name: "tool without schema", edit: func(r *Request) { r.Tools[0].InputSchema = nil }, param: "tools.0.input_schema", substr: "required"},
		{name: "tool schema not an object", edit: func(r *Request) { r.Tools[0].InputSchema = json.RawMessage(`"x"`) }, param: "tools.0.input_schema"},
		{name: "tool schema not JSON", edit: func(r *Request) { r.Tools[0].InputSchema = json.RawMessage(`{`) }, param: "tools.0.input_schema"},
		{name: "tool description not UTF-8", edit: func(r *Request) { r.Tools[0].Description = "\xff" }, param: "tools.0.description"},
		{name: "duplicate tool names", edit: func(r *Request) { r.Tools = append(r.Tools, r.Tools[0]) }, param: "tools.1.name", substr: "unique"},
		{name: "named tool missing", edit: func(r *Request) { r.ToolChoice.Name = "other" }, param: "tool_choice.name", substr: `no tool named "other"`},
		{name: "named tool without name", edit: func(r *Request) { r.ToolChoice.Name = "" }, param: "tool_choice.name", substr: "required"},
		{name: "named tool without tools", edit: func(r *Request) { r.Tools = nil }, param: "tool_choice.name"},
		{name: "unknown tool choice", edit: func(r *Request) { r.ToolChoice.Type = 9 }, param: "tool_choice.type"},
		{name: "any without tools", edit: func(r *Request) { r.ToolChoice, r.Tools = ToolChoice{Type: ToolAny}, nil }},
		{name: "user id not UTF-8", edit: func(r *Request) { r.UserID = "\xff" }, param: "metadata.user_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := valid()
			tt.edit(r)
			validate := r.Validate
			if tt.count {
				validate = r.ValidateCount
			}
			err := validate()
			if tt.param == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			var e *apierr.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want an *apierr.Error", err)
			}
			if e.Kind != apierr.InvalidRequest || e.Param != tt.param {
				t.Errorf("got kind %v param %q, want invalid_request_error about %q (%s)", e.Kind, e.Param, tt.param, e.Message)
			}
			if !strings.HasPrefix(e.Message, tt.param+": ") || !strings.Contains(e.Message, tt.substr) {
				t.Errorf("got message %q, want it to name %q and say %q", e.Message, tt.param, tt.substr)
			}
		})
	}
}

func TestValidateNil(t *testing.T) {
	var r *Request
	var e *apierr.Error
	if err := r.Validate(); !errors.As(err, &e) || e.Kind != apierr.InvalidRequest || !strings.Contains(e.Message, "nil") {
		t.Errorf("got %v, want a 400 saying the request is nil", err)
	}
}

func TestValidToolName(t *testing.T) {
	for s, want := range map[string]bool{
		"get_weather": true, "a-B_9": true, strings.Repeat("x", 128): true,
		"": false, "a b": false, "a.b": false, "é": false, strings.Repeat("x", 129): false,
	} {
		if got := ValidToolName(s); got != want {
			t.Errorf("ValidToolName(%q): got %v, want %v", s, got, want)
		}
	}
}

func TestValidateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under -race (json.Valid's scanner comes from a sync.Pool)")
	}
	r := valid()
	if n := testing.AllocsPerRun(100, func() {
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("got %v allocations per valid request, want 0", n)
	}
}

func BenchmarkValidate(b *testing.B) {
	r := valid()
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestValidateDecoded: a decoder's request is trusted for the UTF-8 of its blocks' text and
// data and for its image sources meeting the image rules, and for nothing else.
func TestValidateDecoded(t *testing.T) {
	bad := "caf\xe9"
	for _, tt := range []struct {
		name   string
		mutate func(r *Request)
		ok     bool // ValidateDecoded's answer; Validate refuses every one
	}{
		{"message text", func(r *Request) { r.Messages[0].Content[0].Text = bad }, true},
		{"system text", func(r *Request) { r.System[0].Text = bad }, true},
		{"image data", func(r *Request) {
			r.Messages[0].Content = append(r.Messages[0].Content, Block{Type: BlockImage, MediaType: "image/png", Data: bad})
		}, true},
		// The image rules, which the decoder checked with the field's own name: not again.
		{"image data not base64", func(r *Request) { r.Messages[0].Content[1].Data = "!!!!" }, true},
		{"image URL file:", func(r *Request) { r.Messages[0].Content[1] = Block{Type: BlockImage, URL: "file:///etc/passwd"} }, true},
		{"image media type", func(r *Request) { r.Messages[0].Content[1].MediaType = "text/html" }, true},
		{"image without a source", func(r *Request) { r.Messages[0].Content[1].Data = "" }, false},
		{"model", func(r *Request) { r.Model = bad }, false},
		{"stop sequence", func(r *Request) { r.StopSequences = []string{bad} }, false},
		{"empty text", func(r *Request) { r.Messages[0].Content[0].Text = "" }, false},
		{"max_tokens", func(r *Request) { r.MaxTokens = 0 }, false},
	} {
		r := valid()
		tt.mutate(r)
		if r.Validate() == nil {
			t.Errorf("%s: Validate accepted it", tt.name)
		}
		if err := ValidateDecoded(r, true); (err == nil) != tt.ok {
			t.Errorf("%s: ValidateDecoded = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
	r := valid()
	r.MaxTokens = 0
	if err := ValidateDecoded(r, false); err != nil {
		t.Errorf("ValidateDecoded without max_tokens for a count: %v", err)
	}
}

// BenchmarkValidateAgent checks a coding agent's 100 KB request: a 20 KB system prompt and 24
// turns of 3 KB, with Validate and as a decoder's request (ValidateDecoded).
func BenchmarkValidateAgent(b *testing.B) {
	line := "The lighthouse keeper climbed the stairs and trimmed the wick before the storm. "
	r := &Request{Model: "m", MaxTokens: 100, System: []Block{{Type: BlockText, Text: strings.Repeat(line, 250)}}}
	for i := range 24 {
		role := RoleUser
		if i%2 == 1 {
			role = RoleAssistant
		}
		r.Messages = append(r.Messages, Message{Role: role, Content: []Block{{Type: BlockText, Text: strings.Repeat(line, 40)}}})
	}
	for _, bb := range []struct {
		name string
		f    func() error
	}{{"Validate", r.Validate}, {"ValidateDecoded", func() error { return ValidateDecoded(r, true) }}} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bb.f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
