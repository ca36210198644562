package server

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/spend"
)

// spendPath serves what each key and team spent and has left (docs/spend.md).
const spendPath = "/spend"

// spendOnMain serves GET /spend on the main listener, which has it only when no admin address
// is set, and only to an admin key (or to every caller when the gateway serves without keys,
// which it does only on loopback).
func (x *exchange) spendOnMain() {
	if _, ok := x.admitOperator(func(k *auth.Key) bool { return k.Admin }, &apierr.Error{
		Kind: apierr.Permission, Code: "ADMIN_ONLY",
		Message: "only an admin API key (keys[].admin) may read the spend report"}); !ok {
		return
	}
	x.onlyMethod(http.MethodGet, x.spendReport)
}

// spendReport serves the report: every budget's counter as the ledger holds it (shared by every
// replica on Redis) and this replica's totals per key since it started.
func (x *exchange) spendReport() {
	var sp *spend.Spender
	if x.p != nil {
		sp, _ = x.p.Spend().(*spend.Spender)
	}
	ctx, cancel := context.WithTimeout(x.r.Context(), 5*time.Second)
	defer cancel()
	rep, err := sp.Report(ctx)
	if err != nil {
		x.fail(&apierr.Error{Kind: apierr.Unavailable, Message: "the budget ledger is unavailable", RetryAfter: time.Second, Cause: err})
		return
	}
	b, err := json.Marshal(rep)
	if err != nil {
		x.fail(err)
		return
	}
	x.writeFull(http.StatusOK, "application/json", b)
}

// setCostHeader sets X-Layer0-Cost, what the request cost, when the operator asked for it
// (spend.header) and the model has a price: on answers written whole, whose cost is known
// before the headers go out.
func (x *exchange) setCostHeader(h http.Header) {
	rec := &x.call.Record
	if !rec.Priced || x.p == nil {
		return
	}
	if sp := x.p.Spend(); sp == nil || !sp.CostHeader() {
		return
	}
	h["X-Layer0-Cost"] = []string{rec.Cost.String()}
}
