package route

import (
	"net/http"
	"time"

	"github.com/layer0ai/layer0/internal/llm"
)

// AppPicker is an application's own replica picker (the root package's WithPicker): it weighs
// the request and the load of each replica that can take it. Implementations must be safe for
// concurrent use and must not retain their arguments.
type AppPicker interface {
	// Pick returns an index into replicas, which is never empty: the replica the request goes
	// to. An index out of range is taken as no choice, and the least loaded of two replicas
	// drawn at random (p2c) is picked instead.
	Pick(req *PickRequest, replicas []ReplicaLoad) int
}

// PickRequest is what an AppPicker knows of the request it places.
type PickRequest struct {
	// Model is the model being served: the one the client asked for (its alias or split
	// resolved), or a fallback of it.
	Model string
	// Key is the name of the API key that sent the request; "" without auth and in-process.
	Key string
	// Header is the request's HTTP headers; nil in-process. Read only.
	Header http.Header
	// Request is the canonical request; nil for the routing decisions made without one (an
	// embeddings request, the legacy negotiate endpoint). Read only.
	Request *llm.Request
	// InputTokens is the request's input, as the gateway counted it; 0 when not counted.
	InputTokens int
	// Retry is set when an earlier attempt of the request, on another replica, failed.
	Retry bool
}

// ReplicaLoad is what an AppPicker knows of one replica. Every replica it is given can take the
// request now: its health checks pass, it is not ejected, its breaker admits it, and the request
// has not failed there already.
type ReplicaLoad struct {
	// Name is the replica's engine name (engines.NAME).
	Name string
	// Outstanding is the number of requests this gateway has in flight on it.
	Outstanding int64
	// Utilization is its engine's utilisation, 0 to 1, from the engine's metrics; 0 when unknown.
	Utilization float64
	// Latency is a moving average of its successful attempts' latency; 0 before the first.
	Latency time.Duration
	// Busy is set for a replica above routing.fallback_utilization_threshold or at its
	// concurrency limit: such replicas are offered only when no other replica of the model, or
	// of its fallbacks, can take the request.
	Busy bool
}

// App adapts an AppPicker to a Picker; the plan gives it the request (pickApp).
type App struct {
	P AppPicker
}

// Pick implements Picker, for a pick without a plan: the request is unknown.
func (a App) Pick(cands []*Replica) int {
	return a.pick(&PickRequest{}, cands, loads(nil, cands, 2))
}

// pick asks the application's picker, falling back to p2c on an index out of range.
func (a App) pick(req *PickRequest, cands []*Replica, ls []ReplicaLoad) int {
	if i := a.P.Pick(req, ls); i >= 0 && i < len(cands) {
		return i
	}
	return P2C{}.Pick(cands)
}

// loads describes cands into dst[:0]; threshold is the utilisation above which a replica is
// busy.
func loads(dst []ReplicaLoad, cands []*Replica, threshold float64) []ReplicaLoad {
	dst = dst[:0]
	for _, r := range cands {
		u := r.Utilization()
		dst = append(dst, ReplicaLoad{Name: r.Name, Outstanding: r.Outstanding(), Utilization: u, Latency: r.Latency(),
			Busy: u > threshold || r.full()})
	}
	return dst
}

// SetRequest gives the plan the canonical request, for an application's picker (App); req must
// stay valid until the plan is done.
func (pl *Plan) SetRequest(req *llm.Request) { pl.req = req }

// appPick is what a plan hands an application's picker, allocated once per plan that uses one:
// the picker's arguments escape (an interface call).
type appPick struct {
	req   PickRequest
	loads []ReplicaLoad
	buf   [8]ReplicaLoad
}

// pickApp places the request with an application's picker.
func (pl *Plan) pickApp(a App, m *model, cands []*Replica) int {
	if pl.app == nil {
		pl.app = &appPick{}
		pl.app.loads = pl.app.buf[:0]
	}
	ap := pl.app
	ap.loads = loads(ap.loads, cands, pl.t.threshold)
	ap.req = PickRequest{Model: m.name, Key: pl.key, Header: pl.header, Request: pl.req, InputTokens: pl.input,
		Retry: len(pl.tried) > 0}
	return a.pick(&ap.req, cands, ap.loads)
}
