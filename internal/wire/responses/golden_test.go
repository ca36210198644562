package responses

import (
	"path/filepath"
	"testing"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/golden"
)

// TestDecodeGolden holds DecodeRequest to the answers recorded in testdata/golden (see package
// golden): the bodies there are the package's test bodies and mutations of them.
func TestDecodeGolden(t *testing.T) {
	lookup := func(id string) (*History, error) {
		if id != "resp_1" {
			return nil, apierr.New(apierr.NotFound, "no response %q", id)
		}
		return &History{System: []llm.Block{{Type: llm.BlockText, Text: "old system"}},
			Messages: []llm.Message{llm.TextMessage(llm.RoleUser, "before"), llm.TextMessage(llm.RoleAssistant, "answer")}}, nil
	}
	golden.Check(t, filepath.Join("testdata", "golden", "request.txt"), func(body []byte) (any, error) {
		r, x, err := DecodeRequest(body, lookup)
		return struct {
			R *llm.Request
			X *Extras
		}{r, x}, err
	})
}
