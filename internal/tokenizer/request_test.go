package tokenizer

import (
	"encoding/json"
	"strings"
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

// TestRequestBounds checks the claims admission relies on, for cl100k_base: no text has more
// tokens than bytes, nor fewer than its bytes over the longest token's, on prose, code, random
// letters, runs of one character (which merge into the longest tokens), CJK, emoji and bytes
// that are not UTF-8.
func TestRequestBounds(t *testing.T) {
	c := Default()
	if m := c.MaxTokenBytes(); m != 128 { // docs/operations.md states it
		t.Fatalf("MaxTokenBytes = %d, want 128", m)
	}
	texts := []string{
		"The quick brown fox jumps over the lazy dog.",
		"func main() {\n\tfmt.Println(\"hi\")\n}\n",
		strings.Repeat(" ", 5000),
		strings.Repeat("=", 5000),
		strings.Repeat("a", 5000),
		strings.Repeat("\n", 300),
		"日本語のテキストと😀😀😀",
		"bad \xff\xfe bytes \xc3",
	}
	letters := make([]byte, 20000)
	for i := range letters {
		letters[i] = "abcdefghijklmnopqrstuvwxyz"[(i*7919+i*i)%26]
	}
	texts = append(texts, string(letters))
	for name, r := range requests() {
		lo, hi := c.RequestBounds(r)
		if n := c.CountRequest(r); n < lo || n > hi {
			t.Errorf("%s: count %d outside [%d, %d]", name, n, lo, hi)
		}
	}
	for _, s := range texts {
		r := &llm.Request{Messages: []llm.Message{{Role: llm.RoleUser, Content: text(s)}}}
		lo, hi := c.RequestBounds(r)
		if n := c.CountRequest(r); n < lo || n > hi {
			t.Errorf("%.20q (%d bytes): count %d outside [%d, %d]", s, len(s), n, lo, hi)
		}
	}
}

// FuzzRequestBounds holds RequestBounds around CountRequest for any text.
func FuzzRequestBounds(f *testing.F) {
	f.Add("hello world", "  \n\t")
	f.Add(strings.Repeat("-", 300), "\xff")
	f.Fuzz(func(t *testing.T, a, b string) {
		c := Default()
		r := &llm.Request{System: text(a), Messages: []llm.Message{{Role: llm.RoleUser, Content: text(b)}}}
		lo, hi := c.RequestBounds(r)
		if n := c.CountRequest(r); n < lo || n > hi {
			t.Fatalf("count %d outside [%d, %d]", n, lo, hi)
		}
	})
}
