package openai

import (
	"path/filepath"
	"testing"

	"github.com/layer0ai/layer0/internal/llm"
	recorded "github.com/layer0ai/layer0/internal/wire/golden"
)

// TestDecodeGolden holds the decoders to the answers recorded in testdata/golden (see package
// golden): the bodies there are the package's test bodies and mutations of them.
func TestDecodeGolden(t *testing.T) {
	t.Run("chat", func(t *testing.T) {
		recorded.Check(t, filepath.Join("testdata", "golden", "chat.txt"), func(body []byte) (any, error) {
			r, x, err := DecodeRequestExtras(body)
			return struct {
				R *llm.Request
				X Extras
			}{r, x}, err
		})
	})
	t.Run("embeddings", func(t *testing.T) {
		recorded.Check(t, filepath.Join("testdata", "golden", "embeddings.txt"), func(body []byte) (any, error) {
			r, b64, err := DecodeEmbeddings(body)
			return struct {
				R      *llm.EmbedRequest
				Base64 bool
			}{r, b64}, err
		})
	})
}
