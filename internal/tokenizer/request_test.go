package tokenizer

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/llm"
)

func text(s string) []llm.Block { return []llm.Block{{Type: llm.BlockText, Text: s}} }

func requests() map[string]*llm.Request {
	return map[string]*llm.Request{
		"empty":            {},
		"one user message": {Messages: []llm.Message{{Role: llm.RoleUser, Content: text("Hello there")}}},
		"system and turns": {
			System: text("Be brief."),
			Messages: []llm.Message{
				{Role: llm.RoleUser, Content: text("Hi")},
				{Role: llm.RoleAssistant, Content: text("Hello! How can I help?")},
				{Role: llm.RoleUser, Content: text("Tell me a joke.")},
			},
		},
		"tools and tool blocks": {
			Tools: []llm.Tool{{Name: "get_weather", Description: "Weather for a city.",
				InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}},
			Messages: []llm.Message{
				{Role: llm.RoleUser, Content: text("Weather in Paris?")},
				{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockToolUse, ID: "toolu_1", Name: "get_weather",
					Input: json.RawMessage(`{"city":"Paris"}`)}}},
				{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockToolResult, ToolUseID: "toolu_1",
					Content: text("18°C, sunny")}}},
			},
		},
		"images": {
			Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{
				{Type: llm.BlockImage, MediaType: "image/png", Data: "iVBORw0KGgo="},
				{Type: llm.BlockImage, URL: "https://example.com/cat.jpg"},
				{Type: llm.BlockText, Text: "What are these?"},
			}}},
		},
	}
}

func TestCountRequest(t *testing.T) {
	c := Default()
	for name, r := range requests() {
		ids := c.AppendRequest(nil, r)
		if got, want := c.CountRequest(r), len(ids); got != want {
			t.Errorf("%s: CountRequest = %d, want len(AppendRequest) = %d", name, got, want)
		}
		if got, want := CountRequest(r), len(ids); got != want {
			t.Errorf("%s: package CountRequest = %d, want %d", name, got, want)
		}
	}
}

func TestAppendRequestLayout(t *testing.T) {
	c := Default()
	r := &llm.Request{
		System:   text("Be brief."),
		Messages: []llm.Message{{Role: llm.RoleUser, Content: text("Hi")}},
	}
	var want []uint32
	want = append(want, IMStart, idSystem, idNewline)
	want = c.Encode(want, "Be brief.")
	want = append(want, IMEnd, IMStart, idUser, idNewline)
	want = c.Encode(want, "Hi")
	want = append(want, IMEnd, IMStart, idAssistant, idNewline)
	if diff := cmp.Diff(want, c.AppendRequest(nil, r)); diff != "" {
		t.Errorf("AppendRequest (-want +got):\n%s", diff)
	}
	if got, want := c.CountRequest(r), 2*SectionOverhead+ReplyOverhead+c.Count("Be brief.")+c.Count("Hi"); got != want {
		t.Errorf("CountRequest = %d, want %d", got, want)
	}
}

// TestAppendRequestGrowsByAppending checks the property prefix caches rely on: adding turns to
// a conversation keeps the earlier prompt, reply opening included, as a prefix.
func TestAppendRequestGrowsByAppending(t *testing.T) {
	c := Default()
	short := &llm.Request{System: text("Be brief."), Messages: []llm.Message{{Role: llm.RoleUser, Content: text("Hi")}}}
	long := &llm.Request{System: short.System, Messages: append(append([]llm.Message(nil), short.Messages...),
		llm.Message{Role: llm.RoleAssistant, Content: text("Hello!")},
		llm.Message{Role: llm.RoleUser, Content: text("Bye")})}
	a, b := c.AppendRequest(nil, short), c.AppendRequest(nil, long)
	if len(b) <= len(a) || !cmp.Equal(a, b[:len(a)]) {
		t.Errorf("AppendRequest(short) = %v is not a prefix of AppendRequest(long) = %v", a, b)
	}
}

func TestAppendRequestImages(t *testing.T) {
	c := Default()
	r := requests()["images"]
	ids := c.AppendRequest(nil, r)
	first, second := ids[3], ids[3+ImageTokens]
	if first < ImageID || second < ImageID {
		t.Fatalf("image tokens %d and %d are not pseudo ids (>= %d)", first, second, ImageID)
	}
	if first == second {
		t.Errorf("two different images share the pseudo id %d", first)
	}
	if got := c.Token(first); got != "" {
		t.Errorf("Token(image id) = %q, want empty", got)
	}
}

func TestCountRequestAllocs(t *testing.T) {
	c := Default()
	r := requests()["tools and tool blocks"]
	if n := testing.AllocsPerRun(20, func() { c.CountRequest(r) }); n != 0 {
		t.Errorf("CountRequest allocates %v times per call, want 0", n)
	}
}

func BenchmarkCountRequest(b *testing.B) {
	c := Default()
	r := &llm.Request{System: text("You are a helpful assistant."),
		Messages: []llm.Message{{Role: llm.RoleUser, Content: text("What is the capital of France? Please answer briefly.")}}}
	b.ReportAllocs()
	for b.Loop() {
		c.CountRequest(r)
	}
}
