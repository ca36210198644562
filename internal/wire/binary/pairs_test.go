package binary

import (
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

// TestDecodeRequestToolPairs checks that a version 2 body whose tool calls and results do not
// pair up is refused as Validate refuses it, naming the offset where the message or block
// starts.
func TestDecodeRequestToolPairs(t *testing.T) {
	use := func(id string) llm.Block {
		return llm.Block{Type: llm.BlockToolUse, ID: id, Name: "f", Input: json.RawMessage(`{}`)}
	}
	result := func(id string) llm.Block {
		return llm.Block{Type: llm.BlockToolResult, ToolUseID: id, Content: []llm.Block{{Type: llm.BlockText, Text: "ok"}}}
	}
	text := llm.Block{Type: llm.BlockText, Text: "hi"}
	tests := []struct {
		name   string
		msgs   []llm.Message
		param  string
		substr string
		tag    byte // the byte at the offset: a role or a block type
	}{
		{"missing result", []llm.Message{{Content: []llm.Block{text}}, {Role: llm.RoleAssistant, Content: []llm.Block{text, use("toolu_a")}}, {Content: []llm.Block{text}}},
			"messages[1]", "without tool_result blocks immediately after: toolu_a", 1},
		{"orphan result", []llm.Message{{Content: []llm.Block{text}}, {Role: llm.RoleAssistant, Content: []llm.Block{use("toolu_a")}}, {Content: []llm.Block{result("toolu_a"), result("toolu_b")}}},
			"messages[2].content[1]", "unexpected tool_use_id found in tool_result blocks: toolu_b", blockToolResult},
		{"duplicate result", []llm.Message{{Content: []llm.Block{text}}, {Role: llm.RoleAssistant, Content: []llm.Block{use("toolu_a")}}, {Content: []llm.Block{text, result("toolu_a"), result("toolu_a")}}},
			"messages[2].content[2]", "duplicate tool_result", blockToolResult},
	}
	offset := regexp.MustCompile(`^binary: offset (\d+): `)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &llm.Request{Model: "m", MaxTokens: 10, Messages: tt.msgs}
			body, err := AppendRequest(nil, req, Mode{Version: V2})
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = DecodeRequestVersion(body, V2)
			var e *apierr.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want an *apierr.Error", err)
			}
			if e.Kind != apierr.InvalidRequest || e.Code != ErrorCode || e.Param != tt.param || !strings.Contains(e.Message, tt.substr) {
				t.Errorf("got %v %s param %q message %q, want 400 %s about %q saying %q", e.Kind, e.Code, e.Param, e.Message, ErrorCode, tt.param, tt.substr)
			}
			m := offset.FindStringSubmatch(e.Message)
			if m == nil {
				t.Fatalf("message %q names no offset", e.Message)
			}
			off, _ := strconv.Atoi(m[1])
			if off >= len(body) || body[off] != tt.tag {
				t.Errorf("offset %d of %d bytes: want it at byte %d (the message or block start)", off, len(body), tt.tag)
			}
		})
	}
}
