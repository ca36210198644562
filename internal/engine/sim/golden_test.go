package sim

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/llm"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// dump writes one line per event, so a change to the simulated answers shows in review: other
// packages' golden streams are built on them.
func dump(events []llm.Event) string {
	var b strings.Builder
	for _, ev := range events {
		switch ev.Kind {
		case llm.EventStart:
			fmt.Fprintf(&b, "start model=%s usage=%+v\n", ev.Model, ev.Usage)
		case llm.EventBlockStart:
			fmt.Fprintf(&b, "block_start %d %s id=%q name=%q\n", ev.Index, ev.Block, ev.ID, ev.Name)
		case llm.EventTextDelta:
			fmt.Fprintf(&b, "text_delta %d %q\n", ev.Index, ev.Text)
		case llm.EventToolDelta:
			fmt.Fprintf(&b, "tool_delta %d %q\n", ev.Index, ev.Text)
		case llm.EventBlockStop:
			fmt.Fprintf(&b, "block_stop %d\n", ev.Index)
		case llm.EventStop:
			fmt.Fprintf(&b, "stop %s seq=%q usage=%+v\n", ev.Stop, ev.StopSequence, ev.Usage)
		}
	}
	return b.String()
}

func TestGolden(t *testing.T) {
	withStop := userReq("Describe the city in two sentences.")
	withStop.StopSequences = []string{" the"}
	short := userReq("Hello!")
	short.MaxTokens = 12
	forcedShort := toolReq("Find docs.", llm.ToolChoice{Type: llm.ToolNamed, Name: "search_docs"})
	forcedShort.MaxTokens = 7
	tests := []struct {
		name string
		cfg  config.Sim
		req  *llm.Request
	}{
		{"lorem", config.Sim{}, userReq("Write a paragraph about layer0.")},
		{"lorem-max-tokens", config.Sim{}, short},
		{"lorem-stop-sequence", config.Sim{}, withStop},
		{"echo", config.Sim{Mode: "echo"}, userReq("Echo: café, 日本語, 🙂.")},
		{"tool-auto", config.Sim{}, toolReq("Ask get_weather about Lyon.", llm.ToolChoice{})},
		{"tool-forced", config.Sim{}, toolReq("Find docs.", llm.ToolChoice{Type: llm.ToolNamed, Name: "search_docs"})},
		{"tool-forced-max-tokens", config.Sim{}, forcedShort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := generate(t, newEngine(t, tt.cfg), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			got := dump(rec.events)
			path := filepath.Join("testdata", "golden", tt.name+".txt")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("%s differs (-want +got), run with -update if intended:\n%s", path, diff)
			}
		})
	}
}

// FuzzToolInput feeds arbitrary schemas to the input generator: it must always return a JSON
// object, whatever the schema.
func FuzzToolInput(f *testing.F) {
	for _, s := range schemas {
		f.Add(s, uint64(1))
	}
	f.Fuzz(func(t *testing.T, raw string, seed uint64) {
		for _, minimal := range []bool{false, true} {
			g := inputGen{r: rng(seed), minimal: minimal}
			out := g.object(nil, json.RawMessage(raw))
			var v map[string]any
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatalf("schema %q: input %s is not a JSON object: %v", raw, out, err)
			}
		}
	})
}

// FuzzEcho echoes arbitrary text under arbitrary max_tokens and stop sequences: every delta is
// valid UTF-8 (the recorder checks), the text is a prefix of the echo, and the counts hold.
func FuzzEcho(f *testing.F) {
	f.Add("Hello, world!", "wor", 5)
	f.Add("日本語のテキスト 🙂👍🏽", "🙂", 3)
	f.Add("a\n  \nb\x7f", "", 1)
	f.Add("\xff\xfe bad bytes", "bad", 100)
	e := newEngine(f, config.Sim{Mode: "echo"})
	f.Fuzz(func(t *testing.T, text, stop string, maxTokens int) {
		if maxTokens < 1 || maxTokens > 1<<16 {
			t.Skip()
		}
		req := userReq(text)
		req.MaxTokens = maxTokens
		if stop != "" {
			req.StopSequences = []string{stop}
		}
		rec, err := generate(t, e, req)
		if err != nil {
			t.Fatal(err)
		}
		resp := rec.coll.Response
		echo := strings.ToValidUTF8(text, "\uFFFD")
		got := textOf(&resp)
		if !strings.HasPrefix(echo, got) {
			t.Fatalf("text %q is not a prefix of %q", got, echo)
		}
		if resp.Stop == llm.StopSequence {
			if !strings.HasPrefix(echo[len(got):], stop) {
				t.Fatalf("stopped at %q, but %q does not follow %q", stop, echo[len(got):], got)
			}
		} else if stop != "" && utf8.ValidString(stop) && strings.Contains(got, stop) {
			t.Fatalf("text %q contains the stop sequence %q", got, stop)
		}
		if resp.Usage.OutputTokens > maxTokens {
			t.Fatalf("%d output tokens, over max_tokens %d", resp.Usage.OutputTokens, maxTokens)
		}
	})
}
