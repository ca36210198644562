package gateway

import (
	"errors"
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

// Check validates cfg (config.Validate, accepting the names registered in o), then the options
// of each engine of a registered kind by its Validate. The error is a *config.Errors naming
// every problem.
func (o *Options) Check(cfg *config.Config) error {
	errs := &config.Errors{}
	if err := cfg.Validate(o.Known()); err != nil {
		if !errors.As(err, &errs) {
			return err
		}
	}
	for _, name := range sortedNames(cfg.Engines) {
		ec := cfg.Engines[name]
		if k, ok := o.Engines[ec.Kind]; ok && k.Validate != nil {
			if err := k.Validate(name, ec); err != nil {
				errs.List = append(errs.List, fmt.Sprintf("engines.%s.options: %v", name, err))
			}
		}
	}
	if len(errs.List) > 0 {
		return errs
	}
	return nil
}

// NewBuiltin builds the engine name of a built-in kind, as the gateway does: an application's
// engine may wrap one. Its error answers go to logger in full.
func NewBuiltin(name string, ec config.Engine, logger *slog.Logger) (engine.Engine, error) {
	if !builtIn(ec.Kind) {
		return nil, fmt.Errorf("layer0: engine %s: kind %q is not built in", name, ec.Kind)
	}
	if len(ec.Options) > 0 {
		return nil, fmt.Errorf("layer0: engine %s: kind %s takes no options", name, ec.Kind)
	}
	if ec.Kind == config.KindSim {
		ec.Sim.SetDefaults() // the rest came with the application's kind's defaults
	}
	return newEngine(name, ec, tokenizer.Default(), &Options{Logger: logger})
}

// newEngine builds the engine name: by the factory registered for its kind, else built in.
func newEngine(name string, ec config.Engine, tok *tokenizer.Codec, o *Options) (engine.Engine, error) {
	if k, ok := o.Engines[ec.Kind]; ok {
		e, err := k.Build(name, ec)
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
