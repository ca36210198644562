package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/syncbuf"
	"github.com/layer0ai/layer0/internal/trace"
)

// TestReusedBodyBufferNeverShows: the strings of a /v1/messages request point into the body's
// pooled buffer, which the next request reuses. Request A is served, then request B of the same
// length and shape, whose bytes land where A's were, then A again shifted by a few bytes (the
// same request for the cache); what A left behind — its cache entry (the
// simulator names its tool_use block after A's tool and quotes A's prompt in its input), its
// access log line and its trace (the offload target its system prompt named), the metrics'
// model label — must still say A.
func TestReusedBodyBufferNeverShows(t *testing.T) {
	var access syncbuf.Buffer
	_, base := serveGateway(t, parseConfig(t, `
engines:
  sim: {kind: sim}
models:
  sim: {engines: [sim], cache: {enabled: true, ttl: 1h}}
offload_targets:
  tgtaaaa: {model: sim}
  tgtbbbb: {model: sim}
debug: {requests: 100}
`), layer0.WithAccessLog(&access))

	// body is a request whose every variable part is made of c: same length, same offsets.
	body := func(c string) string {
		r := strings.Repeat
		return `{"model":"sim","max_tokens":50,"temperature":0,"system":"<|offload:tgt` + r(c, 4) + `|> Be ` + r(c, 8) + `.",` +
			`"tools":[{"name":"tool_` + r(c, 4) + `","description":"` + r(c, 16) + `","input_schema":{"type":"object",` +
			`"properties":{"city":{"type":"string"}},"required":["city"]}}],"tool_choice":{"type":"tool","name":"tool_` + r(c, 4) + `"},` +
			`"messages":[{"role":"user","content":"The city is ` + r(c, 6) + `, call tool_` + r(c, 4) + ` with city ` + r(c, 6) + `."}]}`
	}
	type answer struct {
		id, cache, text string
	}
	post := func(b string) answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Layer0-Debug", "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, out)
		}
		var m struct {
			Content []json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		var text []string
		for _, c := range m.Content {
			text = append(text, string(c))
		}
		return answer{id: resp.Header.Get("Request-Id"), cache: resp.Header.Get("X-Cache"), text: strings.Join(text, "\n")}
	}

	a, b := body("a"), body("b")
	if len(a) != len(b) {
		t.Fatalf("bodies of %d and %d bytes", len(a), len(b))
	}
	var firstA answer
	var idsA []string
	for i := range 20 { // A, then B over A's buffer: again and again, whichever buffer the pool hands out
		// From the second time on A comes shifted by a few spaces: the same request (the
		// cache's key), its bytes elsewhere in the buffer, so that a cached string still
		// pointing into the buffer would read other bytes than A's first body put there.
		ga := post(strings.Repeat(" ", min(i, 7)) + a)
		if i == 0 {
			firstA = ga
			if ga.cache != "MISS" || !strings.Contains(ga.text, `"tool_aaaa"`) {
				t.Fatalf("first answer to A: %+v, want a MISS calling tool_aaaa", ga)
			}
		} else if ga.cache != "HIT" || ga.text != firstA.text {
			t.Fatalf("answer %d to A from the cache:\n%s (%s)\nwant A's first:\n%s", i, ga.text, ga.cache, firstA.text)
		}
		idsA = append(idsA, ga.id)
		if gb := post(b); !strings.Contains(gb.text, `"tool_bbbb"`) || strings.Contains(gb.text, "aaaa") {
			t.Fatalf("answer to B: %s", gb.text)
		}
	}

	// A's trace and access log line, written after B reused the buffer.
	for _, id := range []string{idsA[0], idsA[len(idsA)-1]} {
		var tr trace.Trace
		deadline := time.Now().Add(5 * time.Second)
		for getJSON(t, base+"/debug/requests/"+id, "", &tr) != http.StatusOK {
			if time.Now().After(deadline) {
				t.Fatalf("trace %s never appeared", id)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if tr.Offload != "tgtaaaa" || tr.Model != "sim" {
			t.Errorf("trace of A: offload %q, model %q; want tgtaaaa, sim", tr.Offload, tr.Model)
		}
	}
	lines := map[string]map[string]any{}
	deadline := time.Now().Add(5 * time.Second)
	for len(lines) < 2*len(idsA) {
		if time.Now().After(deadline) {
			t.Fatalf("%d access log lines, want %d", len(lines), 2*len(idsA))
		}
		time.Sleep(5 * time.Millisecond)
		for _, line := range strings.Split(strings.TrimSpace(access.String()), "\n") {
			var r map[string]any
			if json.Unmarshal([]byte(line), &r) == nil {
				if id, _ := r["request_id"].(string); id != "" {
					lines[id] = r
				}
			}
		}
	}
	for _, id := range idsA {
		if r := lines[id]; r["offload"] != "tgtaaaa" || r["model"] != "sim" {
			t.Fatalf("access log line of A: %v, want offload tgtaaaa, model sim", r)
		}
	}
	if strings.Contains(access.String(), "bbbb") == false {
		t.Fatal("the access log has no line of B")
	}
	if n := metricValue(t, base, "layer0_cache_requests_total", `model="sim"`, `result="hit"`); n < 1 {
		t.Errorf("cache hits under model sim: %v", n)
	}
}
