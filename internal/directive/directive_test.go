package directive

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

func sys(texts ...string) *llm.Request {
	r := &llm.Request{Model: "m", MaxTokens: 10}
	for _, t := range texts {
		r.System = append(r.System, llm.Block{Type: llm.BlockText, Text: t})
	}
	return r
}

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		name   string
		format llm.Format
		system []string
		want   Set
		out    []string // the system blocks left; nil: unchanged
	}{
		{"none", llm.FormatAnthropic, []string{"You are terse."}, Set{}, nil},
		{"temperature", llm.FormatAnthropic, []string{"<|temperature:0.3|>\nYou are terse."},
			Set{Temperature: 0.3, HasTemperature: true}, []string{"You are terse."}},
		{"temperature one for anthropic", llm.FormatAnthropic, []string{"<|temperature:1|> hi"},
			Set{Temperature: 1, HasTemperature: true}, []string{" hi"}},
		{"temperature two for openai", llm.FormatOpenAI, []string{"hi <|temperature:2|>"},
			Set{Temperature: 2, HasTemperature: true}, []string{"hi "}},
		{"truncate without a value", llm.FormatAnthropic, []string{"<|truncate|>\nSummarize."},
			Set{Truncate: true}, []string{"Summarize."}},
		{"truncate with a budget", llm.FormatAnthropic, []string{"Summarize.\n<|truncate:4000|>"},
			Set{Truncate: true, TruncateBudget: 4000}, []string{"Summarize.\n"}},
		{"json_mode", llm.FormatAnthropic, []string{"<|json_mode|>Answer."}, Set{JSONMode: true, HasJSONMode: true}, []string{"Answer."}},
		{"json_mode true", llm.FormatAnthropic, []string{"Answer. <|json_mode:true|>"}, Set{JSONMode: true, HasJSONMode: true}, []string{"Answer. "}},
		{"json_mode off", llm.FormatOpenAI, []string{"Answer.\n  <|json_mode:off|>  \nMore."}, Set{HasJSONMode: true}, []string{"Answer.\nMore."}},
		{"offload", llm.FormatBinary, []string{"<|offload:batch|>"}, Set{Offload: "batch"}, []string{}},
		{"value with blanks", llm.FormatAnthropic, []string{"<|temperature: 0.5 |>x"}, Set{Temperature: 0.5, HasTemperature: true}, []string{"x"}},
		{"all four in two blocks", llm.FormatAnthropic, []string{"<|temperature:0|><|json_mode|>\nA", "B\n<|truncate:10|>\n<|offload:x|>\nC"},
			Set{HasTemperature: true, JSONMode: true, HasJSONMode: true, Truncate: true, TruncateBudget: 10, Offload: "x"}, []string{"A", "B\nC"}},
		{"last value wins", llm.FormatAnthropic, []string{"<|temperature:0.1|><|temperature:0.9|>x"}, Set{Temperature: 0.9, HasTemperature: true}, []string{"x"}},
		{"crlf line", llm.FormatAnthropic, []string{"a\r\n<|json_mode|>\r\nb"}, Set{JSONMode: true, HasJSONMode: true}, []string{"a\r\nb"}},
		{"blocks before the first directive kept", llm.FormatAnthropic, []string{"first", "<|json_mode|> second"},
			Set{JSONMode: true, HasJSONMode: true}, []string{"first", " second"}},
		// Look-alikes are content.
		{"chat template tokens", llm.FormatAnthropic, []string{"<|im_start|>system<|im_end|> <|endoftext|>"}, Set{}, nil},
		{"upper case", llm.FormatAnthropic, []string{"<|Temperature:0.5|> <|JSON_MODE|>"}, Set{}, nil},
		{"unknown name", llm.FormatAnthropic, []string{"<|temp:0.5|> <|jsonmode|> <|truncate_all|>"}, Set{}, nil},
		{"prose", llm.FormatAnthropic, []string{"<|temperature is high|> and <| json_mode |>"}, Set{}, nil},
		{"unclosed", llm.FormatAnthropic, []string{"<|temperature:0.5"}, Set{}, nil},
		{"across lines", llm.FormatAnthropic, []string{"<|temperature:\n0.5|>"}, Set{}, nil},
		{"nested opening", llm.FormatAnthropic, []string{"<|temperature:<|json_mode|>"}, Set{JSONMode: true, HasJSONMode: true}, []string{"<|temperature:"}},
		{"half open", llm.FormatAnthropic, []string{"<|<|json_mode|>"}, Set{JSONMode: true, HasJSONMode: true}, []string{"<|"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := sys(tt.system...)
			req.Format = tt.format
			set, blocks, err := Parse(req)
			if err != nil {
				t.Fatal(err)
			}
			if set != tt.want {
				t.Errorf("set: got %+v, want %+v", set, tt.want)
			}
			if tt.out == nil {
				if len(blocks) != len(req.System) || len(blocks) > 0 && &blocks[0] != &req.System[0] {
					t.Errorf("blocks: got a new slice %q, want the request's own", texts(blocks))
				}
				return
			}
			if got := texts(blocks); strings.Join(got, "|") != strings.Join(tt.out, "|") || len(got) != len(tt.out) {
				t.Errorf("blocks: got %q, want %q", got, tt.out)
			}
			for i, s := range tt.system {
				if req.System[i].Text != s {
					t.Errorf("the request was modified: system %d is %q", i, req.System[i].Text)
				}
			}
		})
	}
}

func texts(bs []llm.Block) []string {
	out := []string{}
	for _, b := range bs {
		out = append(out, b.Text)
	}
	return out
}

func TestParseBadValues(t *testing.T) {
	for _, tt := range []struct {
		format llm.Format
		text   string
		name   string
	}{
		{llm.FormatAnthropic, "<|temperature|>", "temperature"},
		{llm.FormatAnthropic, "<|temperature:hot|>", "temperature"},
		{llm.FormatAnthropic, "<|temperature:1.5|>", "temperature"},
		{llm.FormatBinary, "<|temperature:1.01|>", "temperature"},
		{llm.FormatOpenAI, "<|temperature:2.5|>", "temperature"},
		{llm.FormatOpenAI, "<|temperature:-0.1|>", "temperature"},
		{llm.FormatOpenAI, "<|temperature:NaN|>", "temperature"},
		{llm.FormatAnthropic, "<|truncate:0|>", "truncate"},
		{llm.FormatAnthropic, "<|truncate:-5|>", "truncate"},
		{llm.FormatAnthropic, "<|truncate:lots|>", "truncate"},
		{llm.FormatAnthropic, "<|truncate:99999999999|>", "truncate"},
		{llm.FormatAnthropic, "<|json_mode:yes please|>", "json_mode"},
		{llm.FormatAnthropic, "<|offload|>", "offload"},
		{llm.FormatAnthropic, "<|offload:|>", "offload"},
	} {
		req := sys("ok", tt.text)
		req.Format = tt.format
		_, _, err := Parse(req)
		var e *apierr.Error
		if !errors.As(err, &e) || e.Kind != apierr.InvalidRequest || e.Param != "system" || !strings.Contains(e.Message, "<|"+tt.name+"|>") {
			t.Errorf("%s (%s): got %v, want a 400 on system naming <|%s|>", tt.text, tt.format, err, tt.name)
		}
	}
}

// TestParseSmuggled checks that text which forms a directive once the directives inside it are
// removed is refused, not stripped again nor passed on: the engine, another layer0 among them,
// would read the new directive.
func TestParseSmuggled(t *testing.T) {
	for _, text := range []string{
		"<|offl<|json_mode:false|>oad:vip|>",
		"You are terse. <|offload:<|temperature:0|>vip|>",
		"<|<|json_mode|>offload:vip|>",
		"<|offload:vip<|truncate|>|>",
		"<|json<|offload:a|>_mode|>",
		"<|offl<|json_mode|><|temperature:0|>oad:vip|>",
		"<|tempera<|json_mode|>ture:1|>",
	} {
		for _, req := range []*llm.Request{sys(text), sys("first block", text)} {
			_, _, err := Parse(req)
			var e *apierr.Error
			if !errors.As(err, &e) || e.Kind != apierr.InvalidRequest || e.Param != "system" || e.Code != "invalid_directive" {
				t.Errorf("%q: got %v, want a 400 invalid_directive on system", text, err)
			}
		}
	}
	// A directive alone on its line takes its line break, which cannot join two lines into one
	// directive: a directive never spans a line break.
	set, blocks, err := Parse(sys("<|offl\n<|json_mode|>\noad:vip|>"))
	if err != nil || !set.HasJSONMode || texts(blocks)[0] != "<|offl\noad:vip|>" {
		t.Errorf("split across lines: got %+v %q %v, want json_mode and the rest as content", set, texts(blocks), err)
	}
}

// FuzzParse checks, for any system prompt, that Parse never panics, never modifies the request,
// and leaves no directive in what it returns: what reaches the engine holds none.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "plain", "<|json_mode|>", "<|offl<|json_mode:false|>oad:vip|>", "a\n<|truncate:5|>\nb",
		"<|temperature:0.5|><|offload:x|>", "<|<|<|json_mode|>|>|>", "<|im_start|>"} {
		f.Add(s, uint8(0))
	}
	f.Fuzz(func(t *testing.T, text string, format uint8) {
		req := sys(text, "second "+text)
		req.Format = llm.Format(format % 3)
		_, blocks, err := Parse(req)
		if req.System[0].Text != text {
			t.Fatalf("the request was modified: %q", req.System[0].Text)
		}
		if err != nil {
			var e *apierr.Error
			if !errors.As(err, &e) || e.Kind != apierr.InvalidRequest || e.Param != "system" {
				t.Fatalf("error %v, want a 400 on system", err)
			}
			return
		}
		for _, b := range blocks {
			if Contains(b.Text) {
				t.Fatalf("%q: a directive is left in %q", text, b.Text)
			}
		}
	})
}

// TestParseLinear checks that a text full of "<|" without closers costs time linear in its
// size, not quadratic: eight times the text may take about eight times as long (a quadratic
// parse, sixty-four times), each size timed at its fastest of a few runs so that a busy machine
// does not decide.
func TestParseLinear(t *testing.T) {
	fastest := func(n int) time.Duration {
		req := sys(strings.Repeat("<|", n) + "<|json_mode|>")
		best := time.Duration(1<<63 - 1)
		for range 3 {
			start := time.Now()
			set, _, err := Parse(req)
			if err != nil || !set.HasJSONMode {
				t.Fatalf("got %+v, %v", set, err)
			}
			best = min(best, time.Since(start))
		}
		return best
	}
	small, large := fastest(1<<16), fastest(1<<19)
	if large > 32*max(small, time.Millisecond) {
		t.Errorf("1 MiB of \"<|\" took %v, 128 KiB %v: more than linear", large, small)
	}
}

func TestContains(t *testing.T) {
	for text, want := range map[string]bool{
		"":                       false,
		"plain":                  false,
		"<|im_start|>":           false,
		"a <|json_mode|> b":      true,
		"<|offload:x|>":          true,
		"<|temperature:bad|>":    true, // a known name: Parse will refuse it
		"<|<|<|<|":               false,
		strings.Repeat("<|", 50): false,
	} {
		if got := Contains(text); got != want {
			t.Errorf("Contains(%q) = %v, want %v", text, got, want)
		}
	}
}

// prompt2k is a system prompt of about 2,000 tokens (8,000 bytes of prose) without directives,
// with a few look-alikes of a chat template in it.
func prompt2k() string {
	var b strings.Builder
	b.WriteString("<|im_start|>system\n")
	for b.Len() < 8000 {
		b.WriteString("You are a careful assistant. Answer the question in full sentences, cite the section you used, and say so when you do not know. ")
	}
	b.WriteString("<|im_end|>")
	return b.String()
}

func TestParseAllocsWithoutDirectives(t *testing.T) {
	req := sys(prompt2k(), "second block")
	if n := testing.AllocsPerRun(100, func() {
		if _, _, err := Parse(req); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("Parse without directives: %v allocations, want 0", n)
	}
}

func BenchmarkParse2kNoDirectives(b *testing.B) {
	req := sys(prompt2k())
	b.ReportAllocs()
	b.SetBytes(int64(len(req.System[0].Text)))
	for b.Loop() {
		if _, _, err := Parse(req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParse2kDirectives(b *testing.B) {
	req := sys("<|temperature:0.2|>\n<|json_mode|>\n" + prompt2k())
	b.ReportAllocs()
	b.SetBytes(int64(len(req.System[0].Text)))
	for b.Loop() {
		if _, _, err := Parse(req); err != nil {
			b.Fatal(err)
		}
	}
}
