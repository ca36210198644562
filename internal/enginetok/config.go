package enginetok

import (
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/prefix"
	"github.com/layer0ai/layer0/internal/upstream"
)

// Renderer returns the renderer of the prefix index of engine name, configured by ec: gateway
// unless ec.PrefixCache.Tokenize is "engine"; then local, when not nil (the embedded engine,
// which renders in process), else a Tokenizer asking the engine's tokenize endpoint with the
// engine's credentials.
func Renderer(name string, ec config.Engine, gateway, local prefix.Renderer) (prefix.Renderer, error) {
	pc := ec.PrefixCache
	if pc.Tokenize != config.TokenizeEngine {
		return gateway, nil
	}
	if local != nil {
		return local, nil
	}
	h := http.Header{}
	if ec.APIKeyEnv != "" {
		v := os.Getenv(ec.APIKeyEnv)
		if v == "" {
			return nil, fmt.Errorf("enginetok: engine %s: environment variable %s is empty or unset", name, ec.APIKeyEnv)
		}
		h.Set("Authorization", "Bearer "+v)
	}
	connect := ec.Timeouts.Connect
	if connect <= 0 {
		connect = 5 * time.Second
	}
	return New(Options{URL: pc.TokenizeURL, Model: pc.TokenizeModel, Header: h, CacheTokens: pc.TokenizeCacheTokens,
		Client: &http.Client{Transport: upstream.NewTransport(connect, nil)}}), nil
}
