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

// TestCollectorTextStays checks that a Text the collector handed out never changes as later
// deltas arrive (its bytes are shared with the buffer that grows), for blocks past the first two
// too, and that a Content set before the first event is the storage the blocks go to.
func TestCollectorTextStays(t *testing.T) {
	var c Collector
	storage := make([]Block, 0, 4)
	c.Response.Content = storage
	send := func(ev Event) {
		t.Helper()
		if err := c.Send(&ev); err != nil {
			t.Fatal(err)
		}
	}
	send(Event{Kind: EventStart, ID: "m"})
	send(Event{Kind: EventBlockStart, Index: 0, Block: BlockText})
	send(Event{Kind: EventBlockStart, Index: 1, Block: BlockText})
	send(Event{Kind: EventBlockStart, Index: 2, Block: BlockToolUse, ID: "t", Name: "f"})
	send(Event{Kind: EventBlockStart, Index: 3, Block: BlockText})
	type seen struct {
		idx  int
		text string
		want string
	}
	var kept []seen
	wants := make([]string, 4)
	for i := range 300 {
		for _, idx := range []int{0, 1, 3} {
			piece := string(rune('a'+idx)) + strings.Repeat("x", i%7)
			send(Event{Kind: EventTextDelta, Index: idx, Text: piece})
			wants[idx] += piece
			kept = append(kept, seen{idx, c.Response.Content[idx].Text, wants[idx]})
		}
		if i < 3 {
			send(Event{Kind: EventToolDelta, Index: 2, Text: `"` + string(rune('0'+i)) + `"`})
		}
	}
	send(Event{Kind: EventBlockStop, Index: 2})
	for _, k := range kept {
		if k.text != k.want {
			t.Fatalf("block %d: a text handed out changed to %q, want %q", k.idx, k.text, k.want)
		}
	}
	if got := string(c.Response.Content[2].Input); got != `"0""1""2"` {
		t.Errorf("tool input %q", got)
	}
	if &c.Response.Content[0] != &storage[:1][0] {
		t.Error("the blocks are not in the Content set before the first event")
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
