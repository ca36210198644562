package layer0

import (
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/money"
)

// The configuration's parts, so that an application can build or change a configuration in
// code: cfg.Engines["gpu"] = layer0.EngineConfig{Kind: layer0.KindOpenAI, URL: "http://10.0.0.5:8000"}.
// A field left zero takes its default (New and Reload fill them in, as LoadConfig does); each
// field's comment gives its unit and default.
type (
	// Config is the whole configuration; see docs/config.md.
	Config = config.Config
	// Server configures the listener and the request limits.
	Server = config.Server
	// TLS names the certificate and key files of an HTTPS listener.
	TLS = config.TLS
	// EngineConfig is one engine replica's configuration; see also Engine and WithEngine.
	EngineConfig = config.Engine
	// Timeouts bound the calls to an engine.
	Timeouts = config.Timeouts
	// Sim configures the embedded simulated engine.
	Sim = config.Sim
	// SimFail injects failures into the simulated engine.
	SimFail = config.SimFail
	// Model is a model id clients may ask for, served by a pool of engines.
	Model = config.Model
	// Auth holds the settings of authentication beyond the keys themselves.
	Auth = config.Auth
	// Log configures the process log and the access log.
	Log = config.Log
	// Key is an API key clients present, declared by its SHA-256 hash.
	Key = config.Key
	// Rates are the rate limits of a key or of the whole gateway.
	Rates = config.Rates
	// Limits are the global rate limits and the request size limits.
	Limits = config.Limits
	// Split routes one name to several models by weight.
	Split = config.Split
	// SplitTarget is one model of a Split and its weight.
	SplitTarget = config.SplitTarget
	// Routing configures replica picking, health, fallbacks and retries.
	Routing = config.Routing
	// RetryBudget bounds the retries on another replica of the same model.
	RetryBudget = config.RetryBudget
	// Ejection configures passive outlier ejection.
	Ejection = config.Ejection
	// Breaker configures each replica's circuit breaker.
	Breaker = config.Breaker
	// Health configures active health checks.
	Health = config.Health
	// AccessLog says where the access log goes and how it is written.
	AccessLog = config.AccessLog
	// Debug configures the decision traces kept for operators.
	Debug = config.Debug
	// Cache is a model's response cache policy.
	Cache = config.Cache
	// Context is a model's policy for an input no context window of its fallback chain holds.
	Context = config.Context
	// PrefixCache describes an engine's prefix KV cache to the prefix index.
	PrefixCache = config.PrefixCache
	// PrefixRouting tunes the routing of requests by prefix cache (routing.picker: prefix).
	PrefixRouting = config.PrefixRouting
	// PrefixSpread tunes how the prefix picker spreads a hot prefix (routing.prefix.spread).
	PrefixSpread = config.PrefixSpread
	// StickyRouting tunes the sticky picker (routing.picker: sticky).
	StickyRouting = config.StickyRouting
	// OffloadTarget is where the offload directive may send a request.
	OffloadTarget = config.OffloadTarget
	// Store says where the rate-limit counters (and a shared response cache) live.
	Store = config.Store
	// StoreCache is the response cache in the shared store.
	StoreCache = config.StoreCache
	// CORS says which pages of other origins may call the APIs from a browser.
	CORS = config.CORS
	// Telemetry configures the OpenTelemetry traces.
	Telemetry = config.Telemetry
	// OTLP is an OTLP trace exporter's endpoint.
	OTLP = config.OTLP
	// Responses configures the Responses API's stored responses.
	Responses = config.Responses
	// Secret is a configured secret: redacted when the configuration is marshalled.
	Secret = config.Secret
	// Price is what a model's tokens (or engine time) cost (docs/spend.md).
	Price = config.Price
	// ModelPrice is one model's price and its engines' own.
	ModelPrice = config.ModelPrice
	// Budget limits what a key, a team or every request may spend.
	Budget = config.Budget
	// Team groups keys under budgets of their own.
	Team = config.Team
	// Spend configures costs and the global budgets.
	Spend = config.Spend
	// Money is an amount in exact micro-units of the currency.
	Money = money.Micros
	// Admission configures fair admission in front of saturated pools.
	Admission = config.Admission
	// AdmissionBand is one priority band of the admission queue.
	AdmissionBand = config.AdmissionBand
	// ModelRouting is a model's own routing settings (its picker).
	ModelRouting = config.ModelRouting
	// ConfigErrors lists every problem LoadConfig, New or Reload found in a configuration.
	ConfigErrors = config.Errors
)

// Built-in engine kinds (EngineConfig.Kind); WithEngine adds an application's own.
const (
	KindSim       = config.KindSim
	KindOpenAI    = config.KindOpenAI
	KindAnthropic = config.KindAnthropic
	KindLayer0    = config.KindLayer0
)

// Pickers (Routing.Picker). The default, "", places by prefix cache a model with more than one
// replica of an engine with a prefix cache, and picks the least loaded of two drawn at random
// (PickerP2C) for the others; PickerRoundRobin takes the replicas in turn.
const (
	PickerP2C        = config.PickerP2C
	PickerRoundRobin = config.PickerRoundRobin
	PickerPrefix     = config.PickerPrefix
	PickerSticky     = config.PickerSticky
)

// The values of the configuration's enumerated fields, by field.
const (
	HTTP1Lean          = config.HTTP1Lean          // Server.HTTP1: the lean HTTP/1.1 server (the default)
	HTTP1NetHTTP       = config.HTTP1NetHTTP       // Server.HTTP1: net/http's
	AccessJSON         = config.AccessJSON         // AccessLog.Format (the default)
	AccessText         = config.AccessText         // AccessLog.Format
	OverflowRefuse     = config.OverflowRefuse     // Context.Overflow (the default)
	OverflowTruncate   = config.OverflowTruncate   // Context.Overflow
	SplitSemantic      = config.SplitSemantic      // Context.Split (the default)
	SplitFixed         = config.SplitFixed         // Context.Split
	PrefixApproximate  = config.PrefixApproximate  // PrefixCache.Mode (the default)
	PrefixPrecise      = config.PrefixPrecise      // PrefixCache.Mode
	TokenizeGateway    = config.TokenizeGateway    // PrefixCache.Tokenize (the default)
	TokenizeEngine     = config.TokenizeEngine     // PrefixCache.Tokenize
	SimTokenizerCL100K = config.SimTokenizerCL100K // Sim.Tokenizer (the default)
	SimTokenizerBytes  = config.SimTokenizerBytes  // Sim.Tokenizer
	StickyFallbackKey  = config.StickyFallbackKey  // StickyRouting.Fallback
	StickyFallbackLoad = config.StickyFallbackLoad // StickyRouting.Fallback
	StoreMemory        = config.StoreMemory        // Store.Kind (the default)
	StoreRedis         = config.StoreRedis         // Store.Kind
	OnErrorAllow       = config.OnErrorAllow       // Store.OnError
	OnErrorDeny        = config.OnErrorDeny        // Store.OnError
	OTLPHTTP           = config.OTLPHTTP           // OTLP.Protocol (the default)
	OTLPGRPC           = config.OTLPGRPC           // OTLP.Protocol
	PeriodDay          = config.PeriodDay          // Budget.Period
	PeriodWeek         = config.PeriodWeek         // Budget.Period
	PeriodMonth        = config.PeriodMonth        // Budget.Period
)
