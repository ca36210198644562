package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/llm"
)

// parseUsageJSON is ParseUsage as it was written with encoding/json: the reference the
// scanner's version is held to.
func parseUsageJSON(obj []byte) (llm.Usage, bool) {
	var u usageJSON
	if len(obj) == 0 || obj[0] != '{' || json.Unmarshal(obj, &u) != nil {
		return llm.Usage{}, false
	}
	return u.canonical(), true
}

// realUsages are usage objects as engines and the hosted API send them.
var realUsages = []string{
	// vLLM, without and with prefix caching's details.
	`{"prompt_tokens":12,"total_tokens":112,"completion_tokens":100,"prompt_tokens_details":null}`,
	`{"prompt_tokens":21,"total_tokens":24,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":16}}`,
	// SGLang.
	`{"prompt_tokens":8,"total_tokens":108,"completion_tokens":100,"prompt_tokens_details":null,"reasoning_tokens":0}`,
	`{"prompt_tokens":40,"total_tokens":296,"completion_tokens":256,"prompt_tokens_details":{"cached_tokens":32},"reasoning_tokens":0}`,
	// llama.cpp, older and newer.
	`{"completion_tokens":100,"prompt_tokens":12,"total_tokens":112}`,
	`{"completion_tokens":100,"prompt_tokens":12,"total_tokens":112,"prompt_tokens_details":{"cached_tokens":0}}`,
	// The hosted API: cached, reasoning and audio tokens.
	`{"prompt_tokens":1200,"completion_tokens":2,"total_tokens":1202,"prompt_tokens_details":{"cached_tokens":1024,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`,
	`{"prompt_tokens":75,"completion_tokens":1186,"total_tokens":1261,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":1024,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`,
	`{"prompt_tokens":40,"completion_tokens":120,"total_tokens":160,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":25,"text_tokens":15,"image_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":100,"text_tokens":20,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`,
	// Nulls inside the details, as some servers write them; DeepSeek's cache counts; a router's cost.
	`{"prompt_tokens":30,"completion_tokens":null,"total_tokens":30,"prompt_tokens_details":{"cached_tokens":null,"audio_tokens":null},"completion_tokens_details":null}`,
	`{"prompt_tokens":14,"completion_tokens":21,"total_tokens":35,"prompt_tokens_details":{"cached_tokens":0},"prompt_cache_hit_tokens":0,"prompt_cache_miss_tokens":14}`,
	`{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12,"cost":0.000123,"is_byok":false,"cost_details":{"upstream_inference_cost":null}}`,
	`{ "prompt_tokens" : 5 ,
	  "completion_tokens" : 1 }`,
}

// oddUsages are inputs where encoding/json's rules, not the servers' habits, decide.
var oddUsages = []string{
	``, `{}`, `{`, `}`, `null`, ` {"prompt_tokens":1}`, `{"prompt_tokens":1} `, `{"prompt_tokens":1}x`, `{"prompt_tokens":1}{}`,
	`[]`, `"x"`, `{"prompt_tokens":1,}`, `{,"prompt_tokens":1}`, `{"prompt_tokens" 1}`, `{"a":nul}`, `{"a":nullx}`,
	// Duplicates: the last wins; the details merge unless a null dropped them between.
	`{"prompt_tokens":1,"prompt_tokens":7,"completion_tokens":2,"completion_tokens":null}`,
	`{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens_details":{}}`,
	`{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens_details":null}`,
	`{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens_details":null,"prompt_tokens_details":{}}`,
	`{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":5,"cached_tokens":2}}`,
	`{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":5,"cached_tokens":null}}`,
	// Names ignoring case, escapes, the Kelvin sign and the long s; near misses.
	`{"PROMPT_TOKENS":9,"Completion_Tokens":4,"prompt_tokens_DETAILS":{"CACHED_TOKENS":3}}`,
	`{"prompt_to\u212Aens":9,"prompt_tokens_details":{"cached_to` + "\u212a" + `en` + "\u017f" + `":3}}`,
	`{"prompt\u005ftokens":9,"\u0063ompletion_tokens":2,"prompt_tokens_details":{"cached_tokens\u0000":3}}`,
	`{"prompt_tokens ":9,"prompt-tokens":8,"prompttokens":7,"prompt_token":6,"ṗrompt_tokens":5,"İ":1,"prompt_tokens_detail":{"cached_tokens":1}}`,
	`{"\ud800prompt_tokens":9,"prompt_tokens\udc00":8,"\ud83d\ude00":1}`,
	// Nulls, types, numbers.
	`{"prompt_tokens":null,"completion_tokens":null,"prompt_tokens_details":null}`,
	`{"prompt_tokens":1.0}`, `{"prompt_tokens":1e2}`, `{"prompt_tokens":1E2}`, `{"prompt_tokens":-0}`, `{"prompt_tokens":-3}`,
	`{"prompt_tokens":01}`, `{"prompt_tokens":-}`, `{"prompt_tokens":1.}`, `{"prompt_tokens":+1}`,
	`{"prompt_tokens":9223372036854775807}`, `{"prompt_tokens":9223372036854775808}`,
	`{"prompt_tokens":-9223372036854775808}`, `{"prompt_tokens":-9223372036854775809}`,
	`{"prompt_tokens":18446744073709551615}`, `{"prompt_tokens":99999999999999999999}`,
	`{"prompt_tokens":"12"}`, `{"prompt_tokens":true}`, `{"prompt_tokens":[1]}`, `{"prompt_tokens":{}}`,
	`{"prompt_tokens_details":5}`, `{"prompt_tokens_details":"x"}`, `{"prompt_tokens_details":[]}`, `{"prompt_tokens_details":true}`,
	`{"prompt_tokens_details":{"cached_tokens":1.5}}`, `{"prompt_tokens_details":{"cached_tokens":"1"}}`,
	`{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":11}}`, `{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":-1}}`,
	`{"prompt_tokens":"x","prompt_tokens":1}`, `{"total_tokens":1.5e300,"x":[{"y":[null,true,false,"z"]}]}`,
	// Bytes that are not UTF-8, which encoding/json lets through; control characters, which it does not.
	"{\"x\":\"\xff\",\"prompt_tokens\":3}", "{\"prompt_tokens\xff\":3}", "{\"\xffprompt_tokens\":3,\"completion_tokens\":2}",
	"{\"prompt_tokens\":\"\xff\"}", "{\"x\":\"a\x01\"}", "{\"x\":\"a\x7f\"}", "{\"x\":\"\\x\"}",
}

func TestParseUsage(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want llm.Usage
	}{
		{realUsages[1], llm.Usage{InputTokens: 5, OutputTokens: 3, CacheReadInputTokens: 16}},
		{realUsages[6], llm.Usage{InputTokens: 176, OutputTokens: 2, CacheReadInputTokens: 1024}},
		{`{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens_details":{}}`, llm.Usage{InputTokens: 4, CacheReadInputTokens: 5}},
		{`{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens_details":null,"prompt_tokens_details":{}}`, llm.Usage{InputTokens: 9}},
		{`{"PROMPT_TOKENS":9,"Completion_Tokens":4,"prompt_tokens_DETAILS":{"CACHED_TOKENS":3}}`, llm.Usage{InputTokens: 6, OutputTokens: 4, CacheReadInputTokens: 3}},
		{`{"prompt_to` + "\u212a" + `ens":9,"prompt\u005ftokens_details":{"cached_token` + "\u017f" + `":3}}`, llm.Usage{InputTokens: 6, CacheReadInputTokens: 3}},
		{`{"prompt_tokens":-9223372036854775808}`, llm.Usage{InputTokens: -1 << 63}},
	} {
		got, ok := ParseUsage([]byte(tt.in))
		if !ok || got != tt.want {
			t.Errorf("ParseUsage(%s) = %+v, %v; want %+v", tt.in, got, ok, tt.want)
		}
	}
	for _, in := range []string{`{"prompt_tokens":1.0}`, `{"prompt_tokens":9223372036854775808}`, `{"prompt_tokens_details":[]}`, "{\"x\":\"a\x01\"}", `{"prompt_tokens":1}x`} {
		if got, ok := ParseUsage([]byte(in)); ok {
			t.Errorf("ParseUsage(%s) = %+v, want a failure", in, got)
		}
	}
	for _, in := range append(append([]string{}, realUsages...), oddUsages...) {
		checkUsage(t, []byte(in))
	}
}

// TestParseUsageDepth holds ParseUsage to encoding/json's bound on nesting, 10,000 levels
// counting the usage object's own.
func TestParseUsageDepth(t *testing.T) {
	for _, levels := range []int{9999, 10000, 10001} {
		for _, open := range []string{"[", `{"a":`} {
			close := map[string]string{"[": "]", `{"a":`: "}"}[open]
			inner := levels - 1 // the usage object is a level
			in := `{"prompt_tokens":1,"x":` + strings.Repeat(open, inner) + "0" + strings.Repeat(close, inner) + "}"
			want := levels <= 10000
			if _, ok := parseUsageJSON([]byte(in)); ok != want {
				t.Fatalf("encoding/json at %d levels of %s: %v, want %v", levels, open, ok, want)
			}
			checkUsage(t, []byte(in))
			inner-- // inside prompt_tokens_details, a level itself
			in = `{"prompt_tokens_details":{"x":` + strings.Repeat(open, inner) + "0" + strings.Repeat(close, inner) + "}}"
			checkUsage(t, []byte(in))
		}
	}
}

func TestParseUsageAllocs(t *testing.T) {
	for _, in := range append(realUsages, `{"prompt\u005ftokens":9,"PROMPT_TOKENS_DETAILS":{"cached_to`+"\u212a"+`ens":3}}`) {
		b := []byte(in)
		if n := testing.AllocsPerRun(100, func() { ParseUsage(b) }); n != 0 {
			t.Errorf("ParseUsage(%s): %v allocations, want none", in, n)
		}
	}
}

// checkUsage fails when ParseUsage and encoding/json read obj differently.
func checkUsage(t *testing.T, obj []byte) {
	t.Helper()
	got, ok := ParseUsage(obj)
	want, wantOK := parseUsageJSON(obj)
	if got != want || ok != wantOK {
		t.Fatalf("ParseUsage(%q) = %+v, %v; encoding/json: %+v, %v", obj, got, ok, want, wantOK)
	}
}

// FuzzParseUsage holds ParseUsage to encoding/json on any input: the same usage, and a failure
// exactly where encoding/json failed.
func FuzzParseUsage(f *testing.F) {
	for _, in := range realUsages {
		f.Add([]byte(in))
	}
	for _, in := range oddUsages {
		f.Add([]byte(in))
	}
	f.Fuzz(checkUsage)
}

func BenchmarkParseUsage(b *testing.B) {
	obj := []byte(realUsages[6])
	for _, bb := range []struct {
		name  string
		parse func([]byte) (llm.Usage, bool)
	}{{"scanner", ParseUsage}, {"encoding_json", parseUsageJSON}} {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bb.parse(obj)
			}
		})
	}
}
