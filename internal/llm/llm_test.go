package llm

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCollector(t *testing.T) {
	var c Collector
	events := []Event{
		{Kind: EventStart, ID: "msg_1", Model: "m", Usage: Usage{InputTokens: 9}},
		{Kind: EventBlockStart, Index: 0, Block: BlockText},
		{Kind: EventTextDelta, Index: 0, Text: "Hel"},
		{Kind: EventTextDelta, Index: 0, Text: "lo"},
		{Kind: EventBlockStop, Index: 0},
		{Kind: EventBlockStart, Index: 1, Block: BlockToolUse, ID: "toolu_1", Name: "f"},
		{Kind: EventToolDelta, Index: 1, Text: `{"a":`},
		{Kind: EventToolDelta, Index: 1, Text: `1}`},
		{Kind: EventBlockStop, Index: 1},
		{Kind: EventBlockStart, Index: 2, Block: BlockToolUse, ID: "toolu_2", Name: "g"},
		{Kind: EventBlockStop, Index: 2},
		{Kind: EventStop, Stop: StopToolUse, Usage: Usage{InputTokens: 9, OutputTokens: 4, CacheReadInputTokens: 2}},
	}
	for i := range events {
		if err := c.Send(&events[i]); err != nil {
			t.Fatal(err)
		}
	}
	want := Response{ID: "msg_1", Model: "m", Stop: StopToolUse,
		Usage: Usage{InputTokens: 9, OutputTokens: 4, CacheReadInputTokens: 2},
		Content: []Block{
			{Type: BlockText, Text: "Hello"},
			{Type: BlockToolUse, ID: "toolu_1", Name: "f", Input: []byte(`{"a":1}`)},
			{Type: BlockToolUse, ID: "toolu_2", Name: "g", Input: []byte(`{}`)},
		}}
	if diff := cmp.Diff(want, c.Response); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
}

func TestSystemText(t *testing.T) {
	r := Request{System: []Block{{Text: "a"}, {Text: "b"}}}
	if got, want := r.SystemText(), "a\n\nb"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := (&Request{}).SystemText(); got != "" {
		t.Errorf("empty: got %q", got)
	}
}

func TestNames(t *testing.T) {
	if StopSequence.String() != "stop_sequence" || StopToolUse.String() != "tool_use" ||
		StopMaxTokens.String() != "max_tokens" || StopEndTurn.String() != "end_turn" {
		t.Error("stop reason names")
	}
	if BlockToolResult.String() != "tool_result" || RoleAssistant.String() != "assistant" || FormatBinary.String() != "binary" {
		t.Error("block/role/format names")
	}
}
