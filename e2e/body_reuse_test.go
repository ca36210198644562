package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/syncbuf"
	"github.com/layer0ai/layer0/internal/trace"
)

// reuseFront is one client format's request and answer for TestReusedBodyBufferNeverShows.
type reuseFront struct {
	name, path string
	// a and b are the letters of requests A and B: each format its own, since the cache serves
	// a request of one format from the answer to another's equal request.
	a, b string
	// body is a request whose every variable part is made of c: same length, same offsets. It
	// asks for model simCCCC, offloads to tgtCCCC from its system prompt, forces a call of
	// tool_CCCC, and its prompt
	// gives the call's input, the city CCCCCC, which the simulator quotes.
	body func(c string) string
	// content is what of an answer must be the same each time the cache replays it: its
	// content, without the ids and times each answer is given anew.
	content func(t *testing.T, answer []byte) string
}

// schema is the tools' parameters: one string, the city.
const schema = `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`

var reuseFronts = []reuseFront{
	{
		name: "messages", path: "/v1/messages", a: "a", b: "b",
		body: func(c string) string {
			r := strings.Repeat
			return `{"model":"sim` + r(c, 4) + `","max_tokens":50,"temperature":0,"system":"<|offload:tgt` + r(c, 4) + `|> Be ` + r(c, 8) + `.",` +
				`"tools":[{"name":"tool_` + r(c, 4) + `","description":"` + r(c, 16) + `","input_schema":` + schema + `}],` +
				`"tool_choice":{"type":"tool","name":"tool_` + r(c, 4) + `"},` +
				`"messages":[{"role":"user","content":"The city is ` + r(c, 6) + `: call tool_` + r(c, 4) + ` {\"city\":\"` + r(c, 6) + `\"}"}]}`
		},
		content: func(t *testing.T, answer []byte) string {
			var m struct {
				Content json.RawMessage `json:"content"`
			}
			unmarshal(t, answer, &m)
			return string(m.Content)
		},
	},
	{
		name: "chat-completions", path: "/v1/chat/completions", a: "c", b: "d",
		body: func(c string) string {
			r := strings.Repeat
			return `{"model":"sim` + r(c, 4) + `","max_tokens":50,"temperature":0,"messages":[` +
				`{"role":"system","content":"<|offload:tgt` + r(c, 4) + `|> Be ` + r(c, 8) + `."},` +
				`{"role":"user","content":"The city is ` + r(c, 6) + `: call tool_` + r(c, 4) + ` {\"city\":\"` + r(c, 6) + `\"}"}],` +
				`"tools":[{"type":"function","function":{"name":"tool_` + r(c, 4) + `","description":"` + r(c, 16) + `","parameters":` + schema + `}}],` +
				`"tool_choice":{"type":"function","function":{"name":"tool_` + r(c, 4) + `"}}}`
		},
		content: func(t *testing.T, answer []byte) string {
			var m struct {
				Choices json.RawMessage `json:"choices"`
			}
			unmarshal(t, answer, &m)
			return string(m.Choices)
		},
	},
	{
		// Stored (the API's default): the stored response is fetched once every B has run.
		name: "responses", path: "/v1/responses", a: "e", b: "f",
		body: func(c string) string {
			r := strings.Repeat
			return `{"model":"sim` + r(c, 4) + `","max_output_tokens":50,"temperature":0,"instructions":"<|offload:tgt` + r(c, 4) + `|> Be ` + r(c, 8) + `.",` +
				`"tools":[{"type":"function","name":"tool_` + r(c, 4) + `","description":"` + r(c, 16) + `","parameters":` + schema + `}],` +
				`"tool_choice":{"type":"function","name":"tool_` + r(c, 4) + `"},` +
				`"input":[{"role":"user","content":"The city is ` + r(c, 6) + `: call tool_` + r(c, 4) + ` {\"city\":\"` + r(c, 6) + `\"}"}]}`
		},
		content: func(t *testing.T, answer []byte) string {
			var m struct {
				Output []map[string]any `json:"output"`
			}
			unmarshal(t, answer, &m)
			for _, it := range m.Output {
				delete(it, "id") // an item's id is the response's own
			}
			b, _ := json.Marshal(m.Output)
			return string(b)
		},
	},
}

func unmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}

// TestReusedBodyBufferNeverShows: the strings of a /v1/messages, /v1/chat/completions or
// /v1/responses request point into the body's pooled buffer, which the next request reuses. In
// each format, request A is served, then request B of the same length and shape, whose bytes land
// where A's were, then A again shifted by a few bytes (the same request for the cache); what A
// left behind — its cache entry (the simulator names its tool call after A's tool and quotes A's
// prompt in its input), its access log line and its trace (the offload target its system prompt
// named), the metrics' model label, its span's request model, and for the Responses API its stored response and the
// conversation a previous_response_id continues — must still say A.
func TestReusedBodyBufferNeverShows(t *testing.T) {
	var access syncbuf.Buffer
	recv := newOTLPHTTPReceiver(t)
	cfg := `
engines:
  sim: {kind: sim}
models:
  sim: {engines: [sim], cache: {enabled: true, ttl: 1h}}
offload_targets:
debug: {requests: 500}
telemetry: {sample_ratio: 1, otlp: {endpoint: "` + recv.URL + `"}}
`
	for _, c := range "abcdef" {
		name := strings.Repeat(string(c), 4)
		cfg = strings.Replace(cfg, "models:\n", "models:\n  sim"+name+": {engines: [sim], cache: {enabled: true, ttl: 1h}}\n", 1)
		cfg = strings.Replace(cfg, "offload_targets:\n", "offload_targets:\n  tgt"+name+": {model: sim}\n", 1)
	}
	g, base := serveGateway(t, parseConfig(t, cfg), layer0.WithAccessLog(&access))
	modelOf := map[string]string{} // A's request ids, to the model each asked for
	for _, f := range reuseFronts {
		t.Run(f.name, func(t *testing.T) {
			for _, id := range reusedBodyBuffer(t, base, &access, &f) {
				modelOf[id] = "sim" + strings.Repeat(f.a, 4)
			}
		})
	}
	// The spans of A's requests, exported once the gateway has closed, name the model each
	// asked for.
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, s := range recv.spans() {
		if want, ok := modelOf[attrString(s.Span, "layer0.request_id")]; ok && s.ParentSpanId == nil {
			seen++
			if got := attrString(s.Span, "gen_ai.request.model"); got != want {
				t.Errorf("span of %s: request model %q, want %q", attrString(s.Span, "layer0.request_id"), got, want)
			}
		}
	}
	if seen != len(modelOf) {
		t.Errorf("%d spans of A's requests, want %d", seen, len(modelOf))
	}
}

// reusedBodyBuffer serves A and B of front f in turn and checks what A left behind; it returns
// A's request ids.
func reusedBodyBuffer(t *testing.T, base string, access *syncbuf.Buffer, f *reuseFront) []string {
	type answer struct {
		id, cache, content string
		raw                []byte
	}
	post := func(b string) answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+f.path, strings.NewReader(b))
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
		return answer{id: resp.Header.Get("Request-Id"), cache: resp.Header.Get("X-Cache"), content: f.content(t, out), raw: out}
	}

	r := strings.Repeat
	a, b := f.body(f.a), f.body(f.b)
	toolA, toolB, cityA, tgtA, tgtB := `"tool_`+r(f.a, 4)+`"`, `"tool_`+r(f.b, 4)+`"`, r(f.a, 6), "tgt"+r(f.a, 4), "tgt"+r(f.b, 4)
	modelA, modelB := "sim"+r(f.a, 4), "sim"+r(f.b, 4)
	if len(a) != len(b) {
		t.Fatalf("bodies of %d and %d bytes", len(a), len(b))
	}
	var answersA []answer
	var idsA, idsB []string
	for i := range 20 { // A, then B over A's buffer: again and again, whichever buffer the pool hands out
		// From the second time on A comes shifted by a few spaces: the same request (the
		// cache's key), its bytes elsewhere in the buffer, so that a cached string still
		// pointing into the buffer would read other bytes than A's first body put there.
		ga := post(strings.Repeat(" ", min(i, 7)) + a)
		if i == 0 {
			if ga.cache != "MISS" || !strings.Contains(ga.content, toolA) || !strings.Contains(ga.content, cityA) {
				t.Fatalf("first answer to A: %s (%s), want a MISS calling %s with city %s", ga.content, ga.cache, toolA, cityA)
			}
		} else if ga.cache != "HIT" || ga.content != answersA[0].content {
			t.Fatalf("answer %d to A from the cache:\n%s (%s)\nwant A's first:\n%s", i, ga.content, ga.cache, answersA[0].content)
		}
		answersA, idsA = append(answersA, ga), append(idsA, ga.id)
		gb := post(b)
		if !strings.Contains(gb.content, toolB) || strings.Contains(gb.content, r(f.a, 4)) {
			t.Fatalf("answer to B: %s", gb.content)
		}
		idsB = append(idsB, gb.id)
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
		if tr.Offload != tgtA || tr.Model != modelA {
			t.Errorf("trace of A: offload %q, model %q; want %s, %s", tr.Offload, tr.Model, tgtA, modelA)
		}
	}
	lines := map[string]map[string]any{}
	deadline := time.Now().Add(5 * time.Second)
	for ids := slices.Concat(idsA, idsB); !containsAll(lines, ids); {
		if time.Now().After(deadline) {
			t.Fatalf("%d access log lines, want %d of this format's requests among them", len(lines), len(ids))
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
		if l := lines[id]; l["offload"] != tgtA || l["model"] != modelA {
			t.Fatalf("access log line of A: %v, want offload %s, model %s", l, tgtA, modelA)
		}
	}
	for _, id := range idsB {
		if l := lines[id]; l["offload"] != tgtB || l["model"] != modelB {
			t.Fatalf("access log line of B: %v, want offload %s, model %s", l, tgtB, modelB)
		}
	}
	if n := metricValue(t, base, "layer0_cache_requests_total", `model="`+modelA+`"`, `result="hit"`); n != float64(len(idsA)-1) {
		t.Errorf("cache hits under model %s: %v, want %d", modelA, n, len(idsA)-1)
	}

	if f.path == "/v1/responses" {
		storedResponses(t, base, f.a, answersA[0].raw, answersA[len(answersA)-1].raw)
	}
	return idsA
}

// storedResponses fetches the stored responses whose objects were first and last, after every B
// was served, with the SDK: each is what its POST answered. Then the first is continued by
// previous_response_id with the call's result, and the same conversation is sent again whole (A's
// prompt, its call, the result): the cache serves the second from the first's answer only if the
// stored conversation was A's to the byte.
func storedResponses(t *testing.T, base, c string, first, last []byte) {
	ctx := context.Background()
	r := strings.Repeat
	tool, city := "tool_"+r(c, 4), r(c, 6)
	client := responsesClient(base, "")
	var firstID string
	for _, want := range [][]byte{first, last} {
		var posted struct {
			ID string `json:"id"`
		}
		unmarshal(t, want, &posted)
		if firstID == "" {
			firstID = posted.ID
		}
		got, err := client.Responses.Get(ctx, posted.ID, responses.ResponseGetParams{})
		if err != nil {
			t.Fatalf("GET stored response %s: %v", posted.ID, err)
		}
		var gotObj, wantObj any
		unmarshal(t, []byte(got.RawJSON()), &gotObj)
		unmarshal(t, want, &wantObj)
		if !reflect.DeepEqual(gotObj, wantObj) {
			t.Errorf("stored response %s:\n%s\nwant what its POST answered:\n%s", posted.ID, got.RawJSON(), want)
		}
	}
	var call struct {
		CallID    string `json:"call_id"`
		Arguments string `json:"arguments"`
	}
	var out struct {
		Output []json.RawMessage `json:"output"`
	}
	unmarshal(t, first, &out)
	unmarshal(t, out.Output[0], &call)
	result := responses.ResponseInputItemParamOfFunctionCallOutput("Sunny in " + city + ".")
	result.OfFunctionCallOutput.CallID = oai.String(call.CallID)
	params := responses.ResponseNewParams{Model: "sim", MaxOutputTokens: oai.Int(50), Temperature: oai.Float(0),
		Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction(tool, map[string]any{"type": "object",
			"properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}, false)}}
	cont := params
	cont.PreviousResponseID = oai.String(firstID)
	cont.Input.OfInputItemList = responses.ResponseInputParam{result}
	whole := params
	whole.Input.OfInputItemList = responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("The city is "+city+": call "+tool+` {"city":"`+city+`"}`, responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, tool), result}
	var resps [2]*http.Response
	for i, p := range []responses.ResponseNewParams{cont, whole} {
		if _, err := client.Responses.New(ctx, p, oaiopt.WithResponseInto(&resps[i])); err != nil {
			t.Fatalf("request %d after the stored response %s: %v", i, firstID, err)
		}
	}
	if got := [2]string{resps[0].Header.Get("X-Cache"), resps[1].Header.Get("X-Cache")}; got != [2]string{"MISS", "HIT"} {
		t.Errorf("the continuation of %s, then the same conversation whole: %v, want MISS then HIT", firstID, got)
	}
}

// containsAll reports whether m has every id.
func containsAll(m map[string]map[string]any, ids []string) bool {
	for _, id := range ids {
		if m[id] == nil {
			return false
		}
	}
	return true
}
