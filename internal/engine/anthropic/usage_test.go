package anthropic

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/layer0ai/layer0/internal/llm"
)

func TestMergeUsageValue(t *testing.T) {
	start := llm.Usage{InputTokens: 1, OutputTokens: 2, CacheCreationInputTokens: 3, CacheReadInputTokens: 4}
	tests := []struct {
		name, in string
		want     llm.Usage
	}{
		{"all", `{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":7,"output_tokens":1}`,
			llm.Usage{InputTokens: 10, OutputTokens: 1, CacheReadInputTokens: 7}},
		{"only some (message_delta)", `{"output_tokens":100}`, llm.Usage{InputTokens: 1, OutputTokens: 100, CacheCreationInputTokens: 3, CacheReadInputTokens: 4}},
		{"spaces, nesting and unknown keys", `{ "server_tool_use" : {"input_tokens":99} , "input_tokens" : 5 } `,
			llm.Usage{InputTokens: 5, OutputTokens: 2, CacheCreationInputTokens: 3, CacheReadInputTokens: 4}},
		{"null and non-integers keep the count", `{"input_tokens":null,"output_tokens":1.5,"cache_read_input_tokens":"9"}`, start},
		{"not an object", `[1]`, start},
		{"empty", ``, start},
	}
	for _, tt := range tests {
		got := start
		mergeUsageValue(&got, []byte(tt.in))
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
	v := []byte(`{"input_tokens":10,"output_tokens":1}`)
	var u llm.Usage
	if n := testing.AllocsPerRun(100, func() { mergeUsageValue(&u, v) }); n != 0 {
		t.Errorf("got %v allocations, want 0", n)
	}
}
