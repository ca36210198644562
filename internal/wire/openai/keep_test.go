package openai

import (
	"fmt"
	"strings"
	"testing"

	recorded "github.com/layer0ai/layer0/internal/wire/golden"
)

// The deltas' text a Sink kept is what the engine sent, after the reader's buffer was reused for
// hundreds of later chunks.
func TestReadStreamTextOutlivesTheBuffer(t *testing.T) {
	const head = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	want := recorded.Tokens(500)
	var b strings.Builder
	b.WriteString(head + `{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n")
	for _, w := range want {
		fmt.Fprintf(&b, "%s{\"content\":%q},\"finish_reason\":null}]}\n\n", head, w)
	}
	b.WriteString(head + `{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
	recorded.CheckKeptText(t, ReadStream, b.String(), want)
}
