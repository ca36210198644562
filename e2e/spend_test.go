package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/money"
	"github.com/layer0ai/layer0/internal/spend"
	"github.com/layer0ai/layer0/internal/store/redistest"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

// spendPrice is the price table of the spend tests, per million tokens: input 3, output 15,
// cache write 3.75, cache read 0.30.
var spendPrice = spend.Price{Input: 3_000_000, Output: 15_000_000, CacheWrite: 3_750_000, CacheRead: 300_000}

// spendReplicas serves three gateways on srv, a key of team "research" whose budget is budget,
// and the sim as the model "m" priced by spendPrice; it returns their base URLs and access logs.
func spendReplicas(t *testing.T, srv *redistest.Server, secret string, budget money.Micros, itl time.Duration) ([]string, []*syncbuf.Buffer) {
	t.Helper()
	var bases []string
	var logs []*syncbuf.Buffer
	for range 3 {
		var access syncbuf.Buffer
		cfg := parseConfig(t, fmt.Sprintf(`
store: {kind: redis, url: %q, timeout: 5s, replicas: 3, lease_ttl: 3s}
keys:
  - {name: a, hash: %s, team: research}
  - {name: ops, hash: %s, admin: true}
teams:
  research: {budgets: [{amount: %s, period: day}]}
prices:
  m: {input: 3, output: 15, cache_write: 3.75, cache_read: 0.30}
spend: {header: true}
engines:
  sim: {kind: sim, sim: {inter_token_latency: %s}}
models:
  m: {engines: [sim]}
`, srv.URL(), authHash(secret), authHash(spendAdmin), budget, itl))
		_, base := serveGateway(t, cfg, layer0.WithAccessLog(&access))
		bases = append(bases, base)
		logs = append(logs, &access)
	}
	return bases, logs
}

// spendRun sends requests streamed by the official SDK from clients goroutines, each until the
// budget refuses it or rounds requests were sent, spread over bases; during may act while they
// run. It counts the answers: served, refused by the budget, anything else is an error.
func spendRun(t *testing.T, bases []string, secret string, clients, rounds int, during func(served *atomic.Int64)) (served, refused int64) {
	t.Helper()
	var ok, no atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range clients {
		c := anthropic.NewClient(option.WithBaseURL(bases[i%len(bases)]), option.WithAPIKey(secret), option.WithMaxRetries(2))
		wg.Go(func() {
			<-start
			for r := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				s := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "m", MaxTokens: 16,
					Messages: userText(fmt.Sprintf("Tell me about budgets, client %d round %d.", i, r))})
				for s.Next() {
				}
				err := s.Err()
				cancel()
				var ae *anthropic.Error
				switch {
				case err == nil:
					ok.Add(1)
				case errors.As(err, &ae) && ae.StatusCode == 429 && strings.Contains(ae.RawJSON(), "budget exceeded"):
					no.Add(1)
					return
				default:
					t.Errorf("client %d: %v", i, err)
					return
				}
			}
		})
	}
	close(start)
	if during != nil {
		during(&ok)
	}
	wg.Wait()
	return ok.Load(), no.Load()
}

// spendLogged checks every access-log record's cost against the price table applied to the
// usage it logs, and returns their sum.
func spendLogged(t *testing.T, logs []*syncbuf.Buffer) (money.Micros, int) {
	t.Helper()
	var sum money.Micros
	n := 0
	for _, l := range logs {
		for _, line := range l.Lines() {
			var r struct {
				Status    int             `json:"status"`
				Cost      json.RawMessage `json:"cost"`
				In        int             `json:"input_tokens"`
				Out       int             `json:"output_tokens"`
				CacheRead int             `json:"cache_read_input_tokens"`
				CacheW    int             `json:"cache_creation_input_tokens"`
				Team      string          `json:"team"`
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil || r.Status != 200 {
				continue
			}
			cost, err := money.Parse(string(r.Cost))
			if err != nil {
				t.Fatalf("cost %q: %v (%s)", r.Cost, err, line)
			}
			u := spendUsage(r.In, r.Out, r.CacheW, r.CacheRead)
			if want := spendPrice.Cost(u, 0); cost != want || r.Team != "research" {
				t.Errorf("logged cost %s, team %q; want %s for %+v, research", cost, r.Team, want, u)
			}
			sum += cost
			n++
		}
	}
	return sum, n
}

// spendAdmin is the admin key of the spend tests, which may read /spend.
const spendAdmin = "l0-spend-admin"

// spendReport reads the team's budget from base's /spend with the admin key (on the main
// listener: no admin address is set); the team's key itself is refused.
func spendReport(t *testing.T, base, secret string) spend.BudgetState {
	t.Helper()
	get := func(key string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, base+"/spend", nil)
		req.Header.Set("x-api-key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := get(secret); resp.StatusCode != 403 {
		t.Errorf("GET /spend with a key that is not admin: %d; want 403", resp.StatusCode)
	}
	resp := get(spendAdmin)
	defer resp.Body.Close()
	var rep spend.Report
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil || len(rep.Teams) != 1 || len(rep.Teams[0].Budgets) != 1 {
		t.Fatalf("GET /spend: %d %+v %v", resp.StatusCode, rep, err)
	}
	return rep.Teams[0].Budgets[0]
}

// TestSpendBudgetExactAcrossReplicas: three replicas on one Redis, 100 concurrent streaming
// clients of one team whose budget is 20 requests' worst case: every request is served or
// refused with the budget's 429, the team never spends more than its budget, and each logged
// cost is the price table applied to the engine's own usage.
func TestSpendBudgetExactAcrossReplicas(t *testing.T) {
	testSpendBudget(t, false)
}

// TestSpendBudgetRedisRestart: the same while Redis is killed and restarted empty mid-run.
func TestSpendBudgetRedisRestart(t *testing.T) {
	testSpendBudget(t, true)
}

func testSpendBudget(t *testing.T, kill bool) {
	srv := redistest.Start(t)
	const secret = "l0-spend-test"
	// A prompt of this shape is about 20 tokens; its worst case with max_tokens 16 is about
	// 20×3.75 + 16×15 = 315 micro-units. The budget holds about 20 of them.
	budget, itl, rounds := money.Micros(6300), 2*time.Millisecond, 1
	var during func(*atomic.Int64)
	if kill {
		// Requests of about 300ms, the budget about 300 of them: Redis goes away while the
		// clients spend it, and comes back empty.
		budget, itl, rounds = 94500, 20*time.Millisecond, 10
		during = func(served *atomic.Int64) {
			// Once every replica has read the budget (a replica that never did has no share
			// while Redis is away) and some of it is spent.
			for deadline := time.Now().Add(20 * time.Second); served.Load() < 30 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			srv.Stop()
			time.Sleep(500 * time.Millisecond)
			srv.Restart()
		}
	}
	bases, logs := spendReplicas(t, srv, secret, budget, itl)
	served, refused := spendRun(t, bases, secret, 100, rounds, during)
	// The access log is written in batches by a goroutine of its own: the last answers' records
	// may follow their responses by a moment.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		n := 0
		for _, l := range logs {
			n += strings.Count(l.String(), `"status":200`)
		}
		if int64(n) >= int64(served) {
			break
		}
	}
	logged, n := spendLogged(t, logs)
	t.Logf("served %d, refused %d; logged %d answers costing %s of a budget of %s", served, refused, n, logged, budget)
	if logged > budget {
		t.Errorf("spent %s of a budget of %s", logged, budget)
	}
	if served == 0 || refused == 0 || int64(n) != served {
		t.Errorf("served %d (logged %d), refused %d: want some of each, every one served logged", served, n, refused)
	}
	var metric float64
	for _, b := range bases {
		if v, ok := findMetric(t, b, "layer0_cost_total", `model="m"`, `key="a"`, `team="research"`); ok {
			metric += v
		}
	}
	if d := metric - float64(logged)/float64(money.Unit); d > 1e-9 || d < -1e-9 {
		t.Errorf("layer0_cost_total sums to %v; want the logged %s", metric, logged)
	}
	st := spendReport(t, bases[0], secret)
	spent, err := money.Parse(st.Spent)
	if err != nil {
		t.Fatal(err)
	}
	// With Redis restarted, a settlement whose answer was lost is written again: the ledger may
	// count more than was logged (stricter), never less, and never past the budget.
	if spent > budget || spent < logged || (!kill && spent != logged) || st.Reserved != "0.000000" {
		t.Errorf("the team's budget on /spend: %+v; want %s spent (logged), nothing reserved, at most %s", st, logged, budget)
	}
}

func spendUsage(in, out, cw, cr int) (u llm.Usage) {
	u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens = in, out, cw, cr
	return u
}
