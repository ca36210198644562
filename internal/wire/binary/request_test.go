package binary

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

func TestNegotiateVersion(t *testing.T) {
	tests := []struct {
		name    string
		ct, hdr string
		want    Version
		wantErr string // a substring of the message; "" for success
	}{
		{"plain", MediaType, "", V1, ""},
		{"case and spaces", "Application/X-Anthropic-Binary ; version=1", "", V1, ""},
		{"param 2", MediaType + "; version=2", "", V2, ""},
		{"quoted param", MediaType + `; version="2"`, "", V2, ""},
		{"header 2", MediaType, "2", V2, ""},
		{"both agree", MediaType + "; version=2", "2", V2, ""},
		{"both disagree", MediaType + "; version=2", "1", 0, "says version 2 but X-Binary-Version says 1"},
		{"unsupported param", MediaType + "; version=3", "", 0, "unsupported version"},
		{"unsupported header", MediaType, "0", 0, "unsupported version"},
		{"garbage header", MediaType, "two", 0, "unsupported version"},
		{"json", "application/json", "", 0, "want application/x-anthropic-binary"},
		{"missing", "", "", 0, "want application/x-anthropic-binary"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			h.Set("Content-Type", tc.ct)
			if tc.hdr != "" {
				h.Set(VersionHeader, tc.hdr)
			}
			got, err := NegotiateVersion(h)
			if tc.wantErr == "" {
				if err != nil || got != tc.want {
					t.Errorf("got %d, %v; want %d, nil", got, err, tc.want)
				}
				return
			}
			checkInvalid(t, err, tc.wantErr)
		})
	}
}

// checkInvalid checks err is a 400 INVALID_BINARY whose message contains want.
func checkInvalid(t *testing.T, err error, want string) *apierr.Error {
	t.Helper()
	var e *apierr.Error
	if !errors.As(err, &e) {
		t.Fatalf("got error %v, want *apierr.Error", err)
	}
	if e.Status() != http.StatusBadRequest || e.Code != ErrorCode {
		t.Errorf("got status %d code %q, want 400 %q", e.Status(), e.Code, ErrorCode)
	}
	if !strings.Contains(e.Message, want) {
		t.Errorf("got message %q, want it to contain %q", e.Message, want)
	}
	if !strings.HasPrefix(e.Message, "binary: ") {
		t.Errorf("got message %q, want the prefix %q", e.Message, "binary: ")
	}
	return e
}

// TestTruncatedAtEveryByte cuts each valid request vector at every byte: each prefix must be
// refused, naming the field the cut falls in and the offset where that field starts, except
// where a version-2 body may end (between params).
func TestTruncatedAtEveryByte(t *testing.T) {
	for _, v := range requestVectors() {
		body := joined(v.parts)
		// For each byte, the field it belongs to.
		field := make([]string, 0, len(body))
		ends := map[int]bool{} // offsets where a v2 body may end
		inParam := false
		for _, p := range v.parts {
			m := p.Meaning
			if strings.HasPrefix(m, "param tag") {
				inParam = false
				ends[len(field)] = true
			}
			name := m
			switch {
			case inParam:
				name = "param length" // the length is checked against the body first
			case strings.HasPrefix(m, "param length"):
				inParam = true
			}
			for range len(mustHex(p.Hex)) {
				field = append(field, name)
			}
		}
		for cut := range len(body) {
			_, _, err := DecodeRequestVersion(body[:cut], v.mode.Version)
			if v.mode.Version == V2 && ends[cut] {
				if err != nil {
					t.Errorf("%s: cut at %d, between params: %v", v.name, cut, err)
				}
				continue
			}
			if err == nil {
				t.Errorf("%s: cut at %d: got nil error", v.name, cut)
				continue
			}
			e := checkInvalid(t, err, "binary: offset ")
			// A count that the bytes left cannot hold is refused before its items are read.
			if strings.HasSuffix(e.Param, "count") && strings.Contains(e.Message, "cannot fit") {
				continue
			}
			if !strings.HasPrefix(field[cut], e.Param) {
				t.Errorf("%s: cut at %d: got param %q, want the field of %q (%s)", v.name, cut, e.Param, field[cut], e.Message)
			}
		}
	}
}

func v1Body(parts ...any) []byte {
	return joined(cat(append([]any{txt("ANTH", "magic")}, parts...)...))
}

func TestDecodeRequestErrors(t *testing.T) {
	model := cat(u8(3, ""), txt("sim", ""))
	v2head := cat(txt("ANTH", ""), u8(2, ""), str("sim", ""), uv(5, ""))
	pad := cat(u8(1, "system param, so that counts fit the body"), uv(3, ""), txt("pad", ""))
	userHi := cat(uv(1, "count"), u8(0, "user"), uv(1, "blocks"), u8(0, "text"), str("hi", ""))
	tests := []struct {
		name    string
		v       Version
		body    []byte
		param   string
		message string
	}{
		{"v1 empty body", V1, nil, "magic", "offset 0: magic: got , want"},
		{"v1 model length zero", V1, v1Body(u8(0, "")), "model name length", "offset 4: model name length: must be at least 1"},
		{"v1 invalid UTF-8 in the model", V1, v1Body(u8(2, ""), bs("c3 28", "")), "model name", "invalid UTF-8 at offset 5"},
		{"v1 only system", V1, v1Body(model, u8(1, ""), u8(2, ""), u16(1, ""), txt("x", ""), u16(5, "")), "message count", "only system messages"},
		{"v1 empty user content", V1, v1Body(model, u8(1, ""), u8(0, ""), u16(0, ""), u16(5, "")), "messages[0].content", "empty"},
		{"v1 second message bad role", V1, v1Body(model, u8(2, ""), u8(0, ""), u16(1, ""), txt("x", ""), u8(3, "")), "messages[1].role", "offset 13: messages[1].role: role 3"},
		{"v2 zero messages", V2, joined(cat(v2head, uv(0, ""))), "message count", "zero messages"},
		{"v2 message count beyond body", V2, joined(cat(v2head, uv(1000, ""))), "message count", "1000 items cannot fit in the 0 bytes left"},
		{"v2 zero blocks", V2, joined(cat(v2head, uv(1, ""), u8(0, ""), uv(0, ""), pad)), "messages[0].block count", "zero blocks"},
		{"v2 bad block type", V2, joined(cat(v2head, uv(1, ""), u8(0, ""), uv(1, ""), u8(9, ""), pad)), "messages[0].content[0].type", "block type 9"},
		{"v2 empty text", V2, joined(cat(v2head, uv(1, ""), u8(0, ""), uv(1, ""), u8(0, ""), str("", ""))), "messages[0].content[0].text", "empty"},
		{"v2 tool_use input not JSON", V2, joined(cat(v2head, uv(1, ""), u8(1, ""), uv(1, ""), u8(2, ""), str("t1", ""), str("f", ""), str("{nope", ""))),
			"messages[0].content[0].input", "not a JSON object"},
		{"v2 tool_use input an array", V2, joined(cat(v2head, uv(1, ""), u8(1, ""), uv(1, ""), u8(2, ""), str("t1", ""), str("f", ""), str("[1]", ""))),
			"messages[0].content[0].input", "not a JSON object"},
		{"v2 tool_use inside tool_result", V2, joined(cat(v2head, uv(1, ""), u8(0, ""), uv(1, ""), u8(3, ""), str("t1", ""), u8(0, ""), uv(1, ""), u8(2, ""), pad)),
			"messages[0].content[0].content[0].type", "text and image blocks only"},
		{"v2 bad image source", V2, joined(cat(v2head, uv(1, ""), u8(0, ""), uv(1, ""), u8(1, ""), u8(7, ""))), "messages[0].content[0].source", "source 7"},
		{"v2 temperature twice", V2, joined(cat(v2head, userHi, u8(2, ""), uv(8, ""), f64(1, ""), u8(2, ""), uv(8, ""), f64(1, ""))), "temperature", "given twice"},
		{"v2 temperature short", V2, joined(cat(v2head, userHi, u8(2, ""), uv(4, ""), u32(1, ""))), "temperature", "length 4, want 8"},
		{"v2 top_p above 1", V2, joined(cat(v2head, userHi, u8(3, ""), uv(8, ""), f64(1.5, ""))), "top_p", "1.5 out of range"},
		{"v2 param length beyond body", V2, joined(cat(v2head, userHi, u8(1, ""), uv(50, ""), txt("abc", ""))), "param length", "50 exceeds the body (3 bytes left)"},
		{"v2 param value with extra bytes", V2, joined(cat(v2head, userHi, u8(4, ""), uv(2, ""), uv(5, ""), u8(0, ""))), "top_k", "1 unread bytes"},
		{"v2 empty stop sequence", V2, joined(cat(v2head, userHi, u8(5, ""), uv(0, ""))), "stop_sequences", "empty"},
		{"v2 schema not an object", V2, joined(cat(v2head, userHi, u8(6, ""), uv(6, ""), str("f", ""), str("", ""), str("[]", ""))), "tools[0].input_schema", "not a JSON object"},
		{"v2 tool choice named without tools", V2, joined(cat(v2head, userHi, u8(7, ""), uv(4, ""), u8(2, ""), str("f", ""), u8(0, ""))), "tool_choice.name", "no tools"},
		{"v2 tool choice names a missing tool", V2, joined(cat(v2head, userHi, u8(6, ""), uv(6, ""), str("f", ""), str("", ""), str("{}", ""),
			u8(7, ""), uv(4, ""), u8(2, ""), str("g", ""), u8(0, ""))), "tool_choice.name", `no tool named "g" in tools`},
		{"v2 tool name pattern", V2, joined(cat(v2head, userHi, u8(6, ""), uv(8, ""), str("a b", ""), str("", ""), str("{}", ""))),
			"tools[0].name", `must match ^[a-zA-Z0-9_-]{1,128}$, got "a b"`},
		{"v2 duplicate tool names", V2, joined(cat(v2head, userHi, u8(6, ""), uv(6, ""), str("f", ""), str("", ""), str("{}", ""),
			u8(6, ""), uv(6, ""), str("f", ""), str("", ""), str("{}", ""))), "tools[1].name", `offset 27: tools[1].name: tool names must be unique; "f" is also tools[0].name`},
		{"v2 tool_use in a user message", V2, joined(cat(v2head, uv(1, ""), u8(0, ""), uv(1, ""), u8(2, ""), str("t1", ""), str("f", ""), str("{}", ""))),
			"messages[0].content[0].type", "offset 13: messages[0].content[0].type: tool_use blocks are only allowed in assistant messages"},
		{"v2 tool_result in an assistant message", V2, joined(cat(v2head, uv(1, ""), u8(1, ""), uv(1, ""), u8(3, ""), str("t1", ""), u8(0, ""), uv(0, ""), pad)),
			"messages[0].content[0].type", "tool_result blocks are only allowed in user messages"},
		{"v2 tool_use without id", V2, joined(cat(v2head, uv(1, ""), u8(1, ""), uv(1, ""), u8(2, ""), str("", ""), str("f", ""), str("{}", ""))),
			"messages[0].content[0].id", "offset 14: messages[0].content[0].id: empty"},
		{"v2 tool_use without name", V2, joined(cat(v2head, uv(1, ""), u8(1, ""), uv(1, ""), u8(2, ""), str("t1", ""), str("", ""), str("{}", ""))),
			"messages[0].content[0].name", "empty"},
		{"v2 tool_result without id", V2, joined(cat(v2head, uv(1, ""), u8(0, ""), uv(1, ""), u8(3, ""), str("", ""), u8(0, ""), uv(0, ""), pad)),
			"messages[0].content[0].tool_use_id", "empty"},
		{"v2 image without url", V2, joined(cat(v2head, uv(1, ""), u8(0, ""), uv(1, ""), u8(1, ""), u8(1, ""), str("", ""), pad)),
			"messages[0].content[0].url", "empty"},
		{"v2 image without media type", V2, joined(cat(v2head, uv(1, ""), u8(0, ""), uv(1, ""), u8(1, ""), u8(0, ""), str("", ""), str("AAAA", ""))),
			"messages[0].content[0].media_type", "empty"},
		{"v2 temperature above 1", V2, joined(cat(v2head, userHi, u8(2, ""), uv(8, ""), f64(5, ""))), "temperature", "offset 19: temperature: 5 out of range (0 to 1)"},
		{"v2 temperature NaN", V2, joined(cat(v2head, userHi, u8(2, ""), uv(8, ""), f64(math.NaN(), ""))), "temperature", "NaN out of range"},
		{"v2 temperature negative", V2, joined(cat(v2head, userHi, u8(2, ""), uv(8, ""), f64(-0.5, ""))), "temperature", "-0.5 out of range"},
		{"v2 bad tool choice", V2, joined(cat(v2head, userHi, u8(7, ""), uv(2, ""), u8(5, ""), u8(0, ""))), "tool_choice.type", "5: want"},
		{"v2 bad output", V2, joined(cat(v2head, userHi, u8(9, ""), uv(1, ""), u8(2, ""))), "output", "2: want 0"},
		{"v2 varint overflow", V2, joined(cat(txt("ANTH", ""), u8(2, ""), str("sim", ""), bs("ff ff ff ff ff ff ff ff ff ff 01", ""))), "max_tokens", "overflows"},
		{"v2 max_tokens above the limit", V2, joined(cat(txt("ANTH", ""), u8(2, ""), str("sim", ""), uv(1<<31, ""))), "max_tokens", "exceeds the limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := DecodeRequestVersion(tc.body, tc.v)
			e := checkInvalid(t, err, tc.message)
			if e.Param != tc.param {
				t.Errorf("got param %q, want %q", e.Param, tc.param)
			}
		})
	}
}

// TestDecodeRequestImageRules: an image meets the rules the JSON APIs apply (llm's image.go),
// refused with the field and its offset; a request built with the package's encoder.
func TestDecodeRequestImageRules(t *testing.T) {
	tests := []struct {
		name    string
		img     llm.Block
		in      bool   // inside a tool_result
		param   string // "" for success
		message string
	}{
		{"url https", llm.Block{URL: "https://example.com/a.png"}, false, "", ""},
		{"url http", llm.Block{URL: "http://example.com/a.png"}, false, "", ""},
		{"base64", llm.Block{MediaType: "image/png", Data: "aGVsbG8="}, false, "", ""},
		{"url file", llm.Block{URL: "file:///etc/passwd"}, false, "messages[0].content[0].url",
			"offset 15: messages[0].content[0].url: must be an http or https URL"},
		{"url gopher in a tool_result", llm.Block{URL: "gopher://localhost:6379/_INFO"}, true, "messages[1].content[0].content[0].url",
			"must be an http or https URL"},
		{"url upper-case scheme", llm.Block{URL: "HTTPS://example.com"}, false, "messages[0].content[0].url", "must be an http or https URL"},
		{"data not base64", llm.Block{MediaType: "image/png", Data: "!!!!"}, false, "messages[0].content[0].data",
			"offset 25: messages[0].content[0].data: must be base64 (standard alphabet, padded)"},
		{"data unpadded", llm.Block{MediaType: "image/png", Data: "aGVsbG8"}, false, "messages[0].content[0].data", "must be base64"},
		{"media type", llm.Block{MediaType: "text/html", Data: "aGVsbG8="}, false, "messages[0].content[0].media_type",
			`offset 15: messages[0].content[0].media_type: must be one of image/jpeg, image/png, image/gif, image/webp, got "text/html"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			img := tc.img
			img.Type = llm.BlockImage
			req := &llm.Request{Model: "sim", MaxTokens: 8, Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{img}}}}
			if tc.in {
				req.Messages = []llm.Message{
					{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockToolUse, ID: "t1", Name: "f", Input: json.RawMessage(`{}`)}}},
					{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockToolResult, ToolUseID: "t1", Content: []llm.Block{img}}}},
				}
			}
			body, err := AppendRequest(nil, req, Mode{Version: V2})
			if err != nil {
				t.Fatalf("AppendRequest: %v", err)
			}
			got, _, err := DecodeRequestVersion(body, V2)
			if tc.param == "" {
				if err != nil {
					t.Fatalf("DecodeRequestVersion: %v", err)
				}
				if b := got.Messages[0].Content[0]; b.URL != img.URL || b.MediaType != img.MediaType || b.Data != img.Data {
					t.Errorf("got block %+v, want %+v", b, img)
				}
				return
			}
			e := checkInvalid(t, err, tc.message)
			if e.Param != tc.param {
				t.Errorf("got param %q, want %q", e.Param, tc.param)
			}
		})
	}
}

func TestEmptySystemParamSkipped(t *testing.T) {
	body := joined(cat(txt("ANTH", ""), u8(2, ""), str("sim", ""), uv(5, ""), uv(1, ""), u8(0, ""), uv(1, ""), u8(0, ""), str("hi", ""),
		u8(0x01, "system"), uv(0, "empty")))
	req, _, err := DecodeRequestVersion(body, V2)
	if err != nil {
		t.Fatalf("DecodeRequestVersion: %v", err)
	}
	if len(req.System) != 0 {
		t.Errorf("got system %+v, want none", req.System)
	}
}

func TestOptionalParamSkipped(t *testing.T) {
	body := joined(cat(txt("ANTH", ""), u8(2, ""), str("sim", ""), uv(5, ""), uv(1, ""), u8(0, ""), uv(1, ""), u8(0, ""), str("hi", ""),
		u8(0x41, "an optional tag from a newer client"), uv(3, ""), bs("01 02 03", ""),
		u8(0x04, "top_k"), uv(1, ""), uv(7, "")))
	req, _, err := DecodeRequestVersion(body, V2)
	if err != nil {
		t.Fatalf("DecodeRequestVersion: %v", err)
	}
	if req.TopK == nil || *req.TopK != 7 {
		t.Errorf("got TopK %v, want 7", req.TopK)
	}
}

func TestAppendRequestV1Refuses(t *testing.T) {
	base := func() *llm.Request {
		return &llm.Request{Model: "sim", MaxTokens: 5, Messages: []llm.Message{{Content: []llm.Block{{Text: "hi"}}}}}
	}
	tests := []struct {
		name   string
		change func(r *llm.Request)
		want   string
	}{
		{"temperature", func(r *llm.Request) { r.Temperature = ptrF(1) }, "temperature"},
		{"top_p", func(r *llm.Request) { r.TopP = ptrF(1) }, "top_p"},
		{"top_k", func(r *llm.Request) { r.TopK = ptrI(1) }, "top_k"},
		{"stop", func(r *llm.Request) { r.StopSequences = []string{"x"} }, "stop sequences"},
		{"tools", func(r *llm.Request) { r.Tools = []llm.Tool{{Name: "f"}} }, "tools"},
		{"user id", func(r *llm.Request) { r.UserID = "u" }, "metadata.user_id"},
		{"max_tokens", func(r *llm.Request) { r.MaxTokens = 70000 }, "max_tokens 70000"},
		{"model", func(r *llm.Request) { r.Model = strings.Repeat("m", 256) }, "model name of 256 bytes"},
		{"two blocks", func(r *llm.Request) { r.Messages[0].Content = append(r.Messages[0].Content, llm.Block{Text: "x"}) }, "message 0"},
		{"long content", func(r *llm.Request) { r.Messages[0].Content[0].Text = strings.Repeat("x", 70000) }, "message 0"},
		{"image", func(r *llm.Request) { r.Messages[0].Content[0] = llm.Block{Type: llm.BlockImage, URL: "u"} }, "message 0"},
		{"256 messages", func(r *llm.Request) {
			for range 255 {
				r.Messages = append(r.Messages, r.Messages[0])
			}
		}, "256 messages"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			tc.change(r)
			_, err := AppendRequest(nil, r, Mode{Version: V1})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "use version 2") {
				t.Errorf("got error %v, want one naming %q and suggesting version 2", err, tc.want)
			}
			if _, err := AppendRequest(nil, r, Mode{Version: V2}); err != nil {
				t.Errorf("version 2: %v", err)
			}
		})
	}
}

// randText returns random text: ASCII words, multi-byte characters and, rarely, long runs.
func randText(r *rand.Rand, maxLen int) string {
	pieces := []string{"a", "hello", " world", "\n", "你好", "é", "🙂", "\t", "{", "}", "\"", "0123"}
	var b strings.Builder
	n := 1 + r.IntN(maxLen)
	for b.Len() < n {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

func randRequest(r *rand.Rand, v Version) *llm.Request {
	req := &llm.Request{Model: randText(r, 40), MaxTokens: 1 + r.IntN(MaxTokensV1), Format: llm.FormatBinary, Stream: true}
	if len(req.Model) > MaxModelLen {
		req.Model = req.Model[:0] + "m"
	}
	for range r.IntN(3) {
		req.System = append(req.System, llm.Block{Type: llm.BlockText, Text: randText(r, 50)})
	}
	for range 1 + r.IntN(6) {
		m := llm.Message{Role: llm.Role(r.IntN(2))}
		if v == V1 {
			m.Content = []llm.Block{{Type: llm.BlockText, Text: randText(r, 300)}}
		} else {
			for range 1 + r.IntN(3) {
				m.Content = append(m.Content, randBlock(r, m.Role, true))
			}
		}
		req.Messages = append(req.Messages, m)
	}
	if v == V1 {
		return req
	}
	pairTools(r, req)
	req.MaxTokens = 1 + r.IntN(MaxTokensV2)
	if r.IntN(2) == 0 {
		req.Temperature = ptrF(r.Float64())
	}
	if r.IntN(2) == 0 {
		req.TopP = ptrF(r.Float64())
	}
	if r.IntN(2) == 0 {
		req.TopK = ptrI(r.IntN(1000))
	}
	for range r.IntN(3) {
		req.StopSequences = append(req.StopSequences, randText(r, 10))
	}
	for i := range r.IntN(3) {
		req.Tools = append(req.Tools, llm.Tool{Name: fmt.Sprintf("tool_%d", i), Description: randText(r, 200),
			InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)})
	}
	if len(req.Tools) > 0 {
		req.ToolChoice = llm.ToolChoice{Type: llm.ToolChoiceType(r.IntN(4)), DisableParallelToolUse: r.IntN(2) == 0}
		if req.ToolChoice.Type == llm.ToolNamed {
			req.ToolChoice.Name = req.Tools[0].Name
		}
	}
	if r.IntN(2) == 0 {
		req.UserID = randText(r, 20)
	}
	return req
}

// pairTools makes the random conversation's tool calls and results pair up, as Validate
// requires: tool_use ids are made unique, every tool_result is dropped, and each assistant
// message with tool_use blocks is followed by a user message answering them all.
func pairTools(r *rand.Rand, req *llm.Request) {
	var msgs []llm.Message
	n := 0
	for _, m := range req.Messages {
		if m.Role == llm.RoleUser {
			kept := m.Content[:0]
			for _, b := range m.Content {
				if b.Type != llm.BlockToolResult {
					kept = append(kept, b)
				}
			}
			if len(kept) == 0 {
				kept = append(kept, llm.Block{Type: llm.BlockText, Text: randText(r, 50) + "."})
			}
			m.Content = kept
		}
		if len(msgs) > 0 && m.Role == llm.RoleUser && hasToolUse(msgs[len(msgs)-1]) {
			m.Content = append(results(r, msgs[len(msgs)-1]), m.Content...)
		}
		if len(msgs) > 0 && m.Role == llm.RoleAssistant && hasToolUse(msgs[len(msgs)-1]) {
			msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: results(r, msgs[len(msgs)-1])})
		}
		for j := range m.Content {
			if m.Content[j].Type == llm.BlockToolUse {
				n++
				m.Content[j].ID = fmt.Sprintf("toolu_%d%s", n, m.Content[j].ID[len("toolu_"):])
			}
		}
		msgs = append(msgs, m)
	}
	if hasToolUse(msgs[len(msgs)-1]) {
		msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: results(r, msgs[len(msgs)-1])})
	}
	req.Messages = msgs
}

func hasToolUse(m llm.Message) bool {
	for _, b := range m.Content {
		if b.Type == llm.BlockToolUse {
			return true
		}
	}
	return false
}

// results returns a tool_result for each tool_use of m.
func results(r *rand.Rand, m llm.Message) []llm.Block {
	var out []llm.Block
	for _, b := range m.Content {
		if b.Type == llm.BlockToolUse {
			res := llm.Block{Type: llm.BlockToolResult, ToolUseID: b.ID, IsError: r.IntN(2) == 0}
			for range r.IntN(3) {
				res.Content = append(res.Content, randBlock(r, llm.RoleUser, false))
			}
			out = append(out, res)
		}
	}
	return out
}

// randBlock returns a random block a message of the role may hold (a tool_result's when top is
// false).
func randBlock(r *rand.Rand, role llm.Role, top bool) llm.Block {
	kinds := 2
	if top {
		kinds = 4
	}
	k := r.IntN(kinds)
	if k == 2 && role == llm.RoleUser || k == 3 && role == llm.RoleAssistant {
		k = 5 - k // tool_use in assistant messages, tool_result in user messages
	}
	switch k {
	case 1:
		if r.IntN(2) == 0 {
			return llm.Block{Type: llm.BlockImage, URL: "https://example.com/" + randText(r, 20)}
		}
		return llm.Block{Type: llm.BlockImage, MediaType: "image/png", Data: "aGVsbG8="}
	case 2:
		return llm.Block{Type: llm.BlockToolUse, ID: "toolu_" + randText(r, 8), Name: "f",
			Input: json.RawMessage(fmt.Sprintf(`{"n":%d,"s":%q}`, r.IntN(100), randText(r, 20)))}
	case 3:
		b := llm.Block{Type: llm.BlockToolResult, ToolUseID: "toolu_x", IsError: r.IntN(2) == 0}
		for range r.IntN(3) {
			b.Content = append(b.Content, randBlock(r, role, false))
		}
		return b
	}
	return llm.Block{Type: llm.BlockText, Text: randText(r, 200)}
}

// TestRequestRoundTrip is a property test: any request a version can carry decodes to itself,
// and its encoding is canonical (re-encoding the decoded request gives the same bytes).
func TestRequestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for _, v := range []Version{V1, V2} {
		for i := range 500 {
			req := randRequest(r, v)
			mode := Mode{Version: v, Text: v == V2 && i%2 == 0}
			body, err := AppendRequest(nil, req, mode)
			if err != nil {
				t.Fatalf("v%d #%d: AppendRequest: %v", v, i, err)
			}
			got, gotMode, err := DecodeRequestVersion(body, v)
			if err != nil {
				t.Fatalf("v%d #%d: DecodeRequestVersion: %v", v, i, err)
			}
			if diff := cmp.Diff(req, got); diff != "" {
				t.Fatalf("v%d #%d: round trip (-want +got):\n%s", v, i, diff)
			}
			if gotMode != mode {
				t.Fatalf("v%d #%d: mode %+v, want %+v", v, i, gotMode, mode)
			}
			again, err := AppendRequest(nil, got, mode)
			if err != nil || string(again) != string(body) {
				t.Fatalf("v%d #%d: re-encoding differs (%v)", v, i, err)
			}
		}
	}
}

func TestDecodeRequestAllocs(t *testing.T) {
	body := joined(requestVectors()[0].parts)
	n := testing.AllocsPerRun(100, func() {
		if _, _, err := DecodeRequestVersion(body, V1); err != nil {
			t.Fatal(err)
		}
	})
	// The request, the body's string copy, the messages and their blocks, the system block.
	if n > 5 {
		t.Errorf("DecodeRequest allocs = %v, want at most 5", n)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, v := range requestVectors() {
		f.Add(joined(v.parts), v.mode.Version == V2)
	}
	for _, v := range invalidVectors() {
		f.Add(joined(v.parts), v.version == V2)
	}
	f.Fuzz(func(t *testing.T, body []byte, v2 bool) {
		v := V1
		if v2 {
			v = V2
		}
		req, mode, err := DecodeRequestVersion(body, v)
		if err != nil {
			var e *apierr.Error
			if !errors.As(err, &e) || e.Code != ErrorCode || e.Status() != http.StatusBadRequest || !strings.HasPrefix(e.Message, "binary: offset ") {
				t.Fatalf("error %v is not a 400 INVALID_BINARY naming an offset", err)
			}
			return
		}
		// What decodes re-encodes to a body that decodes to the same request.
		enc, err := AppendRequest(nil, req, mode)
		if err != nil {
			t.Fatalf("AppendRequest of a decoded request: %v", err)
		}
		again, _, err := DecodeRequestVersion(enc, v)
		if err != nil {
			t.Fatalf("decoding the re-encoded request: %v", err)
		}
		if diff := cmp.Diff(req, again); diff != "" {
			t.Fatalf("re-encoded request differs (-first +second):\n%s", diff)
		}
	})
}

// No version carries a system message inside the conversation: AppendRequest refuses it rather
// than move it.
func TestAppendRequestSystemMessage(t *testing.T) {
	r := &llm.Request{Model: "m", MaxTokens: 8, Messages: []llm.Message{
		{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "q"}}},
		{Role: llm.RoleSystem, Content: []llm.Block{{Type: llm.BlockText, Text: "env"}}},
	}}
	for _, v := range []Version{V1, V2} {
		if _, err := AppendRequest(nil, r, Mode{Version: v, Text: true}); !errors.Is(err, ErrSystemMessage) {
			t.Errorf("version %d: got error %v, want ErrSystemMessage", v, err)
		}
	}
}
