package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/apierr"
)

func userText(s string) Message {
	return Message{Role: RoleUser, Content: []Block{{Type: BlockText, Text: s}}}
}

func uses(ids ...string) Message {
	m := Message{Role: RoleAssistant, Content: []Block{{Type: BlockText, Text: "Checking."}}}
	for _, id := range ids {
		m.Content = append(m.Content, Block{Type: BlockToolUse, ID: id, Name: "get_weather", Input: json.RawMessage(`{}`)})
	}
	return m
}

func results(ids ...string) Message {
	m := Message{Role: RoleUser}
	for _, id := range ids {
		m.Content = append(m.Content, Block{Type: BlockToolResult, ToolUseID: id, Content: []Block{{Type: BlockText, Text: "18C"}}})
	}
	return m
}

func withText(m Message, s string) Message {
	m.Content = append(m.Content, Block{Type: BlockText, Text: s})
	return m
}

// TestValidatePairs covers every way tool calls and results can fail to pair, and the valid
// shapes next to them.
func TestValidatePairs(t *testing.T) {
	tests := []struct {
		name   string
		msgs   []Message
		param  string // "" when valid
		substr string
	}{
		{name: "no tools", msgs: []Message{userText("hi"), {Role: RoleAssistant, Content: []Block{{Type: BlockText, Text: "hello"}}}, userText("bye")}},
		{name: "one call answered", msgs: []Message{userText("w?"), uses("toolu_a"), results("toolu_a")}},
		{name: "answered then continued", msgs: []Message{userText("w?"), uses("toolu_a"), results("toolu_a"), {Role: RoleAssistant, Content: []Block{{Type: BlockText, Text: "18C"}}}, userText("thanks")}},
		{name: "parallel calls answered in order", msgs: []Message{userText("w?"), uses("toolu_a", "toolu_b", "toolu_c"), results("toolu_a", "toolu_b", "toolu_c")}},
		{name: "parallel calls answered out of order", msgs: []Message{userText("w?"), uses("toolu_a", "toolu_b"), results("toolu_b", "toolu_a")}},
		{name: "results followed by text", msgs: []Message{userText("w?"), uses("toolu_a"), withText(results("toolu_a"), "and Paris?")}},
		{name: "text before results", msgs: []Message{userText("w?"), uses("toolu_a"), {Role: RoleUser, Content: []Block{{Type: BlockText, Text: "here"}, results("toolu_a").Content[0]}}}},
		{name: "two rounds", msgs: []Message{userText("w?"), uses("toolu_a"), results("toolu_a"), uses("toolu_b"), results("toolu_b")}},

		{name: "missing result: next is text only", msgs: []Message{userText("w?"), uses("toolu_a"), userText("never mind")},
			param: "messages.1", substr: "tool_use ids were found without tool_result blocks immediately after: toolu_a"},
		{name: "missing result: call is the last message", msgs: []Message{userText("w?"), uses("toolu_a")},
			param: "messages.1", substr: "toolu_a"},
		{name: "missing result: next is an assistant message", msgs: []Message{userText("w?"), uses("toolu_a"), {Role: RoleAssistant, Content: []Block{{Type: BlockText, Text: "x"}}}},
			param: "messages.1", substr: "toolu_a"},
		{name: "orphan result: no call before", msgs: []Message{userText("w?"), {Role: RoleAssistant, Content: []Block{{Type: BlockText, Text: "x"}}}, results("toolu_a")},
			param: "messages.2.content.0", substr: "unexpected tool_use_id found in tool_result blocks: toolu_a"},
		{name: "orphan result: first message", msgs: []Message{results("toolu_a")},
			param: "messages.0.content.0", substr: "toolu_a"},
		{name: "orphan result: call two messages back", msgs: []Message{userText("w?"), uses("toolu_a"), results("toolu_a"), {Role: RoleAssistant, Content: []Block{{Type: BlockText, Text: "x"}}}, results("toolu_a")},
			param: "messages.4.content.0", substr: "corresponding tool_use block in the previous message"},
		{name: "result for the wrong id", msgs: []Message{userText("w?"), uses("toolu_a"), results("toolu_b")},
			param: "messages.1", substr: "toolu_a"},
		{name: "extra result for the wrong id", msgs: []Message{userText("w?"), uses("toolu_a"), results("toolu_a", "toolu_b")},
			param: "messages.2.content.1", substr: "unexpected tool_use_id found in tool_result blocks: toolu_b"},
		{name: "duplicate result", msgs: []Message{userText("w?"), uses("toolu_a"), results("toolu_a", "toolu_a")},
			param: "messages.2.content.1", substr: "duplicate tool_result for tool_use_id toolu_a"},
		{name: "parallel calls, one result missing", msgs: []Message{userText("w?"), uses("toolu_a", "toolu_b", "toolu_c"), results("toolu_a", "toolu_c")},
			param: "messages.1", substr: "immediately after: toolu_b."},
		{name: "parallel calls, two results missing", msgs: []Message{userText("w?"), uses("toolu_a", "toolu_b", "toolu_c"), results("toolu_b")},
			param: "messages.1", substr: "immediately after: toolu_a, toolu_c."},
		{name: "results split across messages", msgs: []Message{userText("w?"), uses("toolu_a", "toolu_b"), results("toolu_a"), results("toolu_b")},
			param: "messages.1", substr: "toolu_b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Request{Model: "m", MaxTokens: 10, Messages: tt.msgs}
			checkParam(t, r.Validate(), tt.param, tt.substr)
			// count_tokens refuses the same conversations.
			checkParam(t, r.ValidateCount(), tt.param, tt.substr)
		})
	}
}

func checkParam(t *testing.T, err error, param, substr string) {
	t.Helper()
	if param == "" {
		if err != nil {
			t.Fatalf("got %v, want no error", err)
		}
		return
	}
	var e *apierr.Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want an *apierr.Error about %s", err, param)
	}
	if e.Kind != apierr.InvalidRequest || e.Param != param {
		t.Errorf("got kind %v param %q, want invalid_request_error about %q (%s)", e.Kind, e.Param, param, e.Message)
	}
	if !strings.HasPrefix(e.Message, param+": ") || !strings.Contains(e.Message, substr) {
		t.Errorf("got message %q, want it to start with %q and say %q", e.Message, param+": ", substr)
	}
}

// TestValidatePairsMany checks the set-based path taken for turns with many parallel calls.
func TestValidatePairsMany(t *testing.T) {
	var ids []string
	for i := range pairScanMax + 8 {
		ids = append(ids, fmt.Sprintf("toolu_%02d", i))
	}
	ok := &Request{Model: "m", MaxTokens: 10, Messages: []Message{userText("go"), uses(ids...), results(ids...)}}
	checkParam(t, ok.Validate(), "", "")

	missing := &Request{Model: "m", MaxTokens: 10, Messages: []Message{userText("go"), uses(ids...), results(ids[1:]...)}}
	checkParam(t, missing.Validate(), "messages.1", "immediately after: toolu_00.")

	none := &Request{Model: "m", MaxTokens: 10, Messages: []Message{userText("go"), uses(ids...), userText("no")}}
	checkParam(t, none.Validate(), "messages.1", "immediately after: toolu_00, toolu_01, ")
	if err := none.Validate(); !strings.Contains(err.Error(), "toolu_15 and 24 more.") {
		t.Errorf("got %q, want it to list 16 ids and count the 24 more", err)
	}

	dup := &Request{Model: "m", MaxTokens: 10, Messages: []Message{userText("go"), uses(ids...), results(append(ids, ids[3])...)}}
	checkParam(t, dup.Validate(), fmt.Sprintf("messages.2.content.%d", len(ids)), "duplicate tool_result for tool_use_id toolu_03")

	orphan := &Request{Model: "m", MaxTokens: 10, Messages: []Message{userText("go"), uses(ids...), results(append(ids, "toolu_x")...)}}
	checkParam(t, orphan.Validate(), fmt.Sprintf("messages.2.content.%d", len(ids)), "toolu_x")
}

// TestValidatePairsAllocs holds the hot path to zero allocations with parallel tool calls.
func TestValidatePairsAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under -race")
	}
	r := &Request{Model: "m", MaxTokens: 10, Messages: []Message{userText("w?"), uses("toolu_a", "toolu_b", "toolu_c"),
		withText(results("toolu_c", "toolu_a", "toolu_b"), "and?")}}
	if n := testing.AllocsPerRun(100, func() {
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("got %v allocations per valid request, want 0", n)
	}
}
