package layer0

import (
	"github.com/layer0ai/layer0/internal/cache"
	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/limit"
	"github.com/layer0ai/layer0/internal/route"
)

// The extension points beside engines (WithEngine): an application's replica pickers, the
// stores of the response cache and of the rate limits, and the pass-through path of an engine
// that decorates a built-in one. See docs/extending.md.
type (
	// Picker is an application's replica picker (WithPicker): Pick returns the index, in
	// replicas, of the replica a request goes to. The replicas given are those of the request's
	// model that can take it now — health checks passing, not ejected, breaker admitting, not
	// already failed for this request — and, while any is, not Busy; the gateway still retries,
	// falls back and meters as with any picker. Pick is called on the request's path: it must
	// be quick, safe for concurrent use, and keep neither argument. An index out of range
	// leaves the choice to the built-in p2c picker.
	Picker = route.AppPicker
	// PickRequest is what a Picker knows of the request: the model served, the API key's name,
	// the HTTP headers, the canonical request and its counted input tokens.
	PickRequest = route.PickRequest
	// ReplicaLoad is what a Picker knows of one replica: its engine's name, the requests in
	// flight on it, its utilisation and latency.
	ReplicaLoad = route.ReplicaLoad
)

// PickerFactory builds the Picker of one model (model is its id in the configuration's models),
// for each model whose routing.picker — or, when it has none, the global routing.picker —
// names it. It is called by New and by every Reload, so a picker's state lasts one
// configuration; keep in the factory's closure what must outlast reloads.
type PickerFactory func(model string) Picker

// WithPicker registers an application's replica picker under name, which routing.picker and a
// model's routing.picker may then give (pass the same option to LoadConfig for a file naming
// it): a configuration naming a picker that is neither built in nor registered is refused. The
// built-in names (p2c, round_robin, prefix, sticky) cannot be replaced.
func WithPicker(name string, f PickerFactory) Option {
	return func(o *options) {
		if o.Pickers == nil {
			o.Pickers = map[string]func(string) route.AppPicker{}
		}
		o.Pickers[name] = f
	}
}

// The response cache's store (WithCacheStore).
type (
	// CacheStore keeps the response cache's answers by key for a time; it must be safe for
	// concurrent use. An entry passed to Put or returned by Get is shared and must not be
	// modified. Get's misses and Put's errors never fail a request: the answer is produced
	// again.
	CacheStore = cache.Store
	// CacheKey identifies an answer: a hash of the model, the tenant and every field of the
	// request that can change the answer. Its String is the hex form, for a store's keys.
	CacheKey = cache.Key
	// CacheEntry is a stored answer: the response's events and what it was stored for. A store
	// that serializes it keeps every field.
	CacheEntry = cache.Entry
)

// WithCacheStore keeps the response cache's answers, for every model with cache.enabled, in s
// instead of a memory store per model (or the shared store of store.cache): the models'
// cache.max_bytes are then s's to apply, or not. The cache's policy — what is cacheable, the
// TTL Put is given, the keys — stays the configuration's.
func WithCacheStore(s CacheStore) Option { return func(o *options) { o.CacheStore = s } }

// NewMemoryCacheStore returns the in-memory store the response cache uses by default: entries
// in least-recently-used order within maxBytes (CacheEntry.Size). An application's store may
// keep one in front of its own.
func NewMemoryCacheStore(maxBytes int64) CacheStore { return cache.NewMemory(maxBytes, nil) }

// The rate limits' store (WithLimitStore).
type (
	// LimitStore holds the rate limits' counters: a rate cell per key, dimension and limit, and
	// a gauge of the requests in flight per key with a concurrency limit. The gateway resolves
	// every cell once per configuration (New, Reload) by its id and then calls only the cells:
	// cells of equal ids must be the same state, which is how the counts outlive a reload and
	// are shared by every gateway given the same store.
	LimitStore = limit.Store
	// RateCell is one rate limit's state (GCRA: the theoretical arrival time of the next unit).
	// An error refuses the request (or admits it, as store.on_error says for Redis).
	RateCell = limit.RateCell
	// LimitGauge counts a key's requests in flight.
	LimitGauge = limit.Gauge
	// LimitRate is a limit of Limit units per Period.
	LimitRate = limit.Rate
	// LimitStatus is a rate cell's state after a call, for the rate-limit headers.
	LimitStatus = limit.Status
)

// WithLimitStore keeps the rate limits' counters in s instead of the memory store (or the
// Redis of store.kind redis, which then still holds the response cache, the budgets and the
// stored responses as configured).
func WithLimitStore(s LimitStore) Option { return func(o *options) { o.LimitStore = s } }

// NewMemoryLimitStore returns the in-memory store the rate limits use by default, whose cells
// implement GCRA exactly: an application's store may delegate to one (to count, or to share one
// among gateways).
func NewMemoryLimitStore() LimitStore { return limit.NewMemory() }

// Pass-through: a request whose client speaks the engine's own wire format goes to an engine
// with a pass-through path (a Forwarder) as the client's bytes, with only the model rewritten,
// and the engine's bytes come back as they are — when no stage of the gateway must change the
// request. The built-in openai, anthropic and layer0 engines have one.
type (
	// Forwarder is an engine with a pass-through path: Format is the wire format it speaks,
	// Forward sends a Pass and writes the engine's answer to the client's writer, holding a
	// stream's first events back until content so that an error before it leaves the writer
	// untouched (the gateway may still try another replica).
	Forwarder = passthrough.Forwarder
	// Pass is one pass-through call: the client's body, the model names, the format, the
	// client's headers, and whether the body is the request the gateway checked (Checked: its
	// model and stream need not be read again; an engine that changes Body clears it).
	Pass = passthrough.Pass
	// PassResult is what a pass-through call read on the way: usage, whether it streamed, the
	// bytes written.
	PassResult = passthrough.Result
	// PassWriter is the client's response writer as a pass-through path writes to it.
	PassWriter = passthrough.Writer
)

// PassThrough returns an engine that generates as outer does and passes a client's bytes
// through inner's pass-through path (when inner has none, outer itself): for an engine that
// decorates a built-in one (NewBuiltinEngine) without changing its answers — metering,
// logging, admission of its own — and would otherwise lose the pass-through path, since an
// Engine-typed field hides Forward. It keeps outer's token counting (TokenCounter); its Close
// is outer's. An engine that must see every request implements Forwarder itself instead,
// calling inner's Forward.
func PassThrough(outer, inner Engine) Engine { return passthrough.Wrap(outer, inner) }
