package llm

import (
	"strings"
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

// TestCollectorLongText checks that a long answer is assembled in place: allocations grow with
// the log of its length, not with its number of deltas (Text += copied it all every time).
func TestCollectorLongText(t *testing.T) {
	var c Collector
	start := []Event{{Kind: EventStart, ID: "m"}, {Kind: EventBlockStart, Index: 0, Block: BlockText}}
	delta := Event{Kind: EventTextDelta, Index: 0, Text: "word "}
	allocs := testing.AllocsPerRun(5, func() {
		c = Collector{}
		for i := range start {
			_ = c.Send(&start[i])
		}
		for range 4096 {
			_ = c.Send(&delta)
		}
	})
	if got, want := c.Response.Content[0].Text, strings.Repeat("word ", 4096); got != want {
		t.Fatalf("got %d bytes of text, want %d", len(got), len(want))
	}
	if allocs > 40 {
		t.Errorf("got %v allocations for 4096 deltas, want at most 40", allocs)
	}
}

func BenchmarkCollector100(b *testing.B) {
	evs := []Event{{Kind: EventStart, ID: "m"}, {Kind: EventBlockStart, Index: 0, Block: BlockText}}
	for range 100 {
		evs = append(evs, Event{Kind: EventTextDelta, Index: 0, Text: " token"})
	}
	evs = append(evs, Event{Kind: EventBlockStop, Index: 0}, Event{Kind: EventStop, Stop: StopEndTurn})
	b.ReportAllocs()
	for b.Loop() {
		var c Collector
		for i := range evs {
			_ = c.Send(&evs[i])
		}
	}
}
