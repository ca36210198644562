package trim

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/tokenizer"
	"github.com/layer0ai/layer0/internal/wire/anthropic"
)

func count(r *llm.Request) (int, error) { return tokenizer.CountRequest(r), nil }

func chat(t *testing.T) *llm.Request {
	t.Helper()
	b, err := os.ReadFile("testdata/chat.json")
	if err != nil {
		t.Fatal(err)
	}
	req, err := anthropic.DecodeRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func guide(t *testing.T) (string, *llm.Request) {
	t.Helper()
	b, err := os.ReadFile("testdata/guide.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	return doc, &llm.Request{Model: "m", MaxTokens: 5, System: []llm.Block{{Type: llm.BlockText, Text: "Answer from the guide."}},
		Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: doc}}}}}
}

func TestCutChatDropsOldestTurnsWhole(t *testing.T) {
	req := chat(t)
	before := tokenizer.CountRequest(req)
	for _, tt := range []struct {
		budget  int
		keep    int // messages kept: req.Messages[keep:]
		dropped int // turns
	}{
		{before - 60, 4, 1},
		{before - 200, 4, 1},
		{150, 8, 2},
	} {
		out, res, err := Cut(req, Options{Budget: tt.budget, Count: count})
		if err != nil {
			t.Fatalf("budget %d: %v", tt.budget, err)
		}
		if !reflect.DeepEqual(out.Messages, req.Messages[tt.keep:]) {
			t.Errorf("budget %d: kept %d messages, want exactly messages %d..%d unchanged", tt.budget, len(out.Messages), tt.keep, len(req.Messages)-1)
		}
		if !reflect.DeepEqual(out.System, req.System) || !reflect.DeepEqual(out.Tools, req.Tools) {
			t.Errorf("budget %d: the system prompt or the tools changed", tt.budget)
		}
		if res.Before != before || res.After != tokenizer.CountRequest(out) || res.After > tt.budget || res.TurnsDropped != tt.dropped || res.MessagesDropped != tt.keep {
			t.Errorf("budget %d: result %+v, want before %d, after the count ≤ budget, %d turns and %d messages dropped", tt.budget, res, before, tt.dropped, tt.keep)
		}
	}
}

func TestCutChatTrimsOldestTurnFirst(t *testing.T) {
	req := chat(t)
	before := tokenizer.CountRequest(req)
	out, res, err := Cut(req, Options{Budget: before - 1, Count: count})
	if err != nil {
		t.Fatal(err)
	}
	// The first user message loses its last sentence; everything else is as it was.
	want := "The billing service has been slow since this morning. Can you look at its log? It usually runs well under load, so something changed."
	if got := out.Messages[0].Content[0].Text; got != want {
		t.Errorf("first message: got %q, want %q", got, want)
	}
	if !reflect.DeepEqual(out.Messages[1:], req.Messages[1:]) || res.TurnsDropped != 0 || res.TextsCut != 1 {
		t.Errorf("only the first text should change: result %+v", res)
	}
	if req.Messages[0].Content[0].Text == want {
		t.Error("the request itself was modified")
	}
}

func TestCutChatStaysValid(t *testing.T) {
	req := chat(t)
	before := tokenizer.CountRequest(req)
	for budget := before + 1; budget > 0; budget -= 3 {
		out, res, err := Cut(req, Options{Budget: budget, Count: count})
		if err != nil {
			if !errors.Is(err, ErrTooSmall) {
				t.Fatalf("budget %d: %v", budget, err)
			}
			continue
		}
		if err := out.Validate(); err != nil {
			t.Fatalf("budget %d: the cut conversation is invalid: %v", budget, err)
		}
		if out.Messages[0].Role != llm.RoleUser {
			t.Errorf("budget %d: starts with %s", budget, out.Messages[0].Role)
		}
		// The latest turn is cut only when it is all that is left.
		if last := out.Messages[len(out.Messages)-1]; len(out.Messages) > 1 && !reflect.DeepEqual(last, req.Messages[len(req.Messages)-1]) {
			t.Errorf("budget %d: the latest turn changed while older ones are kept: %+v", budget, last)
		}
		if res.After > budget {
			t.Errorf("budget %d: %d tokens after", budget, res.After)
		}
	}
}

func TestCutGuideSemantic(t *testing.T) {
	doc, req := guide(t)
	before := tokenizer.CountRequest(req)
	upTo := func(s string) string { return doc[:strings.Index(doc, s)] }
	for _, tt := range []struct {
		budget int
		want   string
	}{
		// A section boundary when it keeps at least half the budget.
		{before / 2, upTo("\n\n## Configuration")},
		{100, upTo("\n\n## Prerequisites")},
		// Else a sentence.
		{45, "# Deploying the service\n\nThis guide walks through a first deployment."},
	} {
		out, _, err := Cut(req, Options{Budget: tt.budget, Count: count})
		if err != nil {
			t.Fatalf("budget %d: %v", tt.budget, err)
		}
		if got := out.Messages[0].Content[0].Text; got != tt.want {
			t.Errorf("budget %d: kept\n%q\nwant\n%q", tt.budget, tail(got), tail(tt.want))
		}
	}
	for budget := before; budget > 25; budget -= 5 {
		out, res, err := Cut(req, Options{Budget: budget, Count: count})
		if err != nil {
			t.Fatalf("budget %d: %v", budget, err)
		}
		got := out.Messages[0].Content[0].Text
		switch {
		case res.After > budget:
			t.Errorf("budget %d: %d tokens after", budget, res.After)
		case !strings.HasPrefix(doc, got):
			t.Errorf("budget %d: not a beginning of the document", budget)
		case !utf8.ValidString(got):
			t.Errorf("budget %d: invalid UTF-8", budget)
		case fenceOpen(got):
			t.Errorf("budget %d: cut inside a code fence: …%q", budget, tail(got))
		}
	}
}

func TestCutGuideFixed(t *testing.T) {
	doc, req := guide(t)
	before := tokenizer.CountRequest(req)
	for budget := before - 1; budget > 25; budget -= 7 {
		out, res, err := Cut(req, Options{Budget: budget, Count: count, Fixed: true})
		if err != nil {
			t.Fatalf("budget %d: %v", budget, err)
		}
		got := out.Messages[0].Content[0].Text
		if !strings.HasPrefix(doc, got) || !utf8.ValidString(got) || res.After > budget || res.After < budget-3 {
			t.Errorf("budget %d: kept %d tokens (%d bytes), want a valid beginning within 3 tokens of the budget", budget, res.After, len(got))
		}
	}
}

func TestCutMaxPerText(t *testing.T) {
	_, req := guide(t)
	before := tokenizer.CountRequest(req)
	out, res, err := Cut(req, Options{Budget: before - 5, Count: count, MaxPerText: 100})
	if err != nil {
		t.Fatal(err)
	}
	if n := tokenizer.Default().Count(out.Messages[0].Content[0].Text); n > 100 || res.After > 120 {
		t.Errorf("the text kept %d tokens (request %d), want at most 100 from max_tokens_per_shard", n, res.After)
	}
}

func TestCutTooSmall(t *testing.T) {
	req := chat(t)
	sys, _ := count(&llm.Request{Model: req.Model, System: req.System, Tools: req.Tools})
	if _, _, err := Cut(req, Options{Budget: sys, Count: count}); !errors.Is(err, ErrTooSmall) {
		t.Errorf("a budget the system prompt and tools fill: got %v, want ErrTooSmall", err)
	}
	out, res, err := Cut(req, Options{Budget: 1 << 20, Count: count})
	if err != nil || out != req || res.Before != res.After {
		t.Errorf("a request that fits: got %v, %+v, want the request itself", err, res)
	}
}

func TestFencedBlocks(t *testing.T) {
	s := "a\n```go\nx\n\n# y\n```\nb\n~~~~\n```\n~~~~~\nc\n   ```\nopen"
	got := fencedBlocks(s)
	want := [][2]int{{2, 19}, {21, 36}, {38, len(s)}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("fences: got %v, want %v", got, want)
	}
}

// fenceOpen reports whether s ends inside a fenced code block.
func fenceOpen(s string) bool {
	f := fencedBlocks(s)
	return len(f) > 0 && f[len(f)-1][1] == len(s) && !strings.HasSuffix(strings.TrimRight(s, "\n"), "```")
}

func tail(s string) string { return s[max(0, len(s)-80):] }
