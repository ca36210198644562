package openai

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// vllmModel is the engine's model name in benchStream.
const vllmModel = "meta-llama/Llama-3.1-8B-Instruct"

// benchStream is a 100-token Chat Completions stream as vLLM writes it when layer0 asked for
// usage: a role chunk, one chunk per token, a finish chunk, the usage-only chunk, [DONE].
func benchStream() []byte {
	var b bytes.Buffer
	head := `data: {"id":"chatcmpl-8d2f0c5b1e7a4c3f9b6a2d1e0f3c4b5a","object":"chat.completion.chunk","created":1735689600,"model":"` + vllmModel + `","choices":[`
	b.WriteString(head + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	words := []string{" The", " lighthouse", " keeper", " watched", " the", " sea", ",", " and", " the", " sea"}
	for i := range 100 {
		fmt.Fprintf(&b, "%s{\"index\":0,\"delta\":{\"content\":%q},\"logprobs\":null,\"finish_reason\":null}]}\n\n", head, words[i%len(words)])
	}
	b.WriteString(head + `{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}` + "\n\n")
	b.WriteString(head + `],"usage":{"prompt_tokens":40,"total_tokens":140,"completion_tokens":100,"prompt_tokens_details":null}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return b.Bytes()
}

// BenchmarkForwardStream: the gateway's own work on a 100-token vLLM stream passed through to
// an OpenAI client — split the chunks, check each, read usage, drop the usage chunk the client
// did not ask for, give the client its model name, copy them — from a buffer that holds the
// whole answer, as a fast engine's arrives; the client's model the engine's ("same") or another
// ("renamed").
func BenchmarkForwardStream(b *testing.B) {
	for _, bc := range []struct{ name, model string }{{"same", vllmModel}, {"renamed", "llama"}} {
		b.Run(bc.name, func(b *testing.B) {
			stream := benchStream()
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			br := bufio.NewReaderSize(nil, 16<<10)
			for b.Loop() {
				br.Reset(bytes.NewReader(stream))
				src := passthrough.Source{Body: br, ContentType: "text/event-stream", Stream: true, ClientModel: bc.model}
				res, err := passthrough.Forward(&chatPolicy{inject: true}, &src, fake.Writer(io.Discard))
				if err != nil || res.Deltas != 100 || res.Usage.OutputTokens != 100 {
					b.Fatalf("forward: %+v, %v", res, err)
				}
			}
		})
	}
}
