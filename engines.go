package layer0

import (
	"fmt"
	"log/slog"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/engine/anthropic"
	l0 "github.com/layer0ai/layer0/internal/engine/layer0"
	"github.com/layer0ai/layer0/internal/engine/openai"
	"github.com/layer0ai/layer0/internal/upstream"
)

// newHTTPEngine builds the engines that live behind a URL: any OpenAI-compatible server, the
// hosted Anthropic API, and another layer0. Each reads its credential from the environment once,
// here. The pipeline sets every request's model to the model's upstream_model, so one engine
// serves all the models that name it. An engine's error answers go to logger in full.
func newHTTPEngine(name string, ec config.Engine, logger *slog.Logger) (engine.Engine, error) {
	var (
		e   engine.Engine
		err error
	)
	uo := upstream.Options{Logger: logger}
	switch ec.Kind {
	case config.KindOpenAI:
		e, err = openai.New(name, ec, openai.Options{Upstream: uo})
	case config.KindAnthropic:
		e, err = anthropic.New(name, ec, anthropic.Options{Upstream: uo})
	case config.KindLayer0:
		e, err = l0.New(name, ec, l0.Options{Upstream: uo})
	default:
		return nil, fmt.Errorf("layer0: engine %s: kind %q is not available in this build", name, ec.Kind)
	}
	if err != nil {
		return nil, fmt.Errorf("layer0: %w", err) // the engine's error names it
	}
	return e, nil
}
