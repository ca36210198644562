package gateway

import (
	"fmt"
	"log/slog"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/engine/anthropic"
	l0 "github.com/layer0ai/layer0/internal/engine/layer0"
	"github.com/layer0ai/layer0/internal/engine/openai"
	"github.com/layer0ai/layer0/internal/engine/sim"
	"github.com/layer0ai/layer0/internal/tokenizer"
	"github.com/layer0ai/layer0/internal/upstream"
)

// builtIn reports whether kind is one of the engine kinds layer0 builds itself.
func builtIn(kind string) bool {
	switch kind {
	case config.KindSim, config.KindOpenAI, config.KindAnthropic, config.KindLayer0:
		return true
	}
	return false
}

// newEngine builds the engine name: by the factory registered for its kind, else built in.
func newEngine(name string, ec config.Engine, tok *tokenizer.Codec, o *Options) (engine.Engine, error) {
	if f := o.Engines[ec.Kind]; f != nil {
		e, err := f(name, ec)
		if err != nil {
			return nil, fmt.Errorf("layer0: engine %s: %w", name, err)
		}
		if e == nil {
			return nil, fmt.Errorf("layer0: engine %s: the factory of kind %q returned no engine", name, ec.Kind)
		}
		return e, nil
	}
	if ec.Kind == config.KindSim {
		e, err := sim.New(ec.Sim, tok)
		if err != nil {
			return nil, fmt.Errorf("layer0: engine %s: %w", name, err)
		}
		return e, nil
	}
	return newHTTPEngine(name, ec, o.Logger)
}

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
