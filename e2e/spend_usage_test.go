package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/money"
	"github.com/layer0ai/layer0/internal/spend"
	"github.com/layer0ai/layer0/internal/syncbuf"
	"github.com/layer0ai/layer0/internal/trace"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// The fake engines' answer: twenty-four words, a content delta each, so twenty-four output
// tokens.
const spendText = "One two three four five six seven eight nine ten eleven twelve " +
	"thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four."

// What the fake engines report of every prompt, whatever it is: an OpenAI-compatible engine's
// prompt_tokens (cached tokens included) and cached_tokens; an Anthropic engine's input_tokens,
// cache_read_input_tokens and cache_creation_input_tokens (each apart).
const (
	oaiPrompt, oaiCached             = 120, 96
	anthInput, anthRead, anthWritten = 30, 80, 16
	// The fakes' output tokens; the deltas a client reads before it hangs up; the most the
	// gateway may send after them before it sees the hang-up, on a busy machine (fewer than
	// the rest of any answer: the stream was cut).
	spendWords, spendCut, spendInFlow = 24, 3, 15
)

// spendSystem is a system prompt long enough for the sim's prefix cache to hold blocks of it:
// the requests after the first in a format read it from the cache.
var spendSystem = strings.Repeat("You are a careful assistant who answers briefly and prices every word. ", 12)

// spendCase is one request: the model (an engine kind: "sim", "oai", "anth"), the client's
// format, and whether it streams, and whether the client hangs up after spendCut deltas.
type spendCase struct {
	model, client  string
	stream, hangUp bool
}

func (c spendCase) String() string {
	mode := "whole"
	switch {
	case c.hangUp:
		mode = "hang-up"
	case c.stream:
		mode = "stream"
	}
	return c.model + "/" + c.client + "/" + mode
}

// spendSeen is what the client saw: the request id, X-Layer0-Cost, the usage the answer
// reported (mapped back to the canonical counts; none for a stream it hung up on, but for an
// Anthropic stream's message_start) and the content deltas read.
type spendSeen struct {
	id, costHeader string
	usage          llm.Usage
	reported       bool // the answer's final usage arrived
	deltas         int
}

// TestSpendCostEveryEngineAndFormat: for every engine kind — the sim, an OpenAI-compatible engine
// reporting cached_tokens, an Anthropic engine reporting cache reads and writes, an
// OpenAI-compatible engine serving the Responses API (another layer0), a layer0 peer — and every
// client format (Messages, Chat Completions, Responses, each through its official SDK), answered
// whole, streamed, and streamed to a client that hangs up after three deltas, the request's cost
// is the price table applied to the usage its engine reported, and is the same in the access
// log, the decision trace, layer0_cost_total and (for an answer written whole) X-Layer0-Cost.
// This covers the pass-through paths (Messages to the Anthropic engine and the peer, Chat
// Completions and Responses to the OpenAI-compatible ones) and the translated ones.
func TestSpendCostEveryEngineAndFormat(t *testing.T) {
	base, access := spendGateway(t)
	simRead, simRan := 0, 0 // the sim's cache reads billed, in the sim's cases run
	for _, model := range []string{"sim", "oai", "anth", "peer", "edge"} {
		for _, client := range []string{"anthropic", "chat", "responses"} {
			for _, mode := range []spendCase{{}, {stream: true}, {stream: true, hangUp: true}} {
				c := spendCase{model: model, client: client, stream: mode.stream, hangUp: mode.hangUp}
				t.Run(c.String(), func(t *testing.T) {
					u := spendCheck(t, base, access, c)
					if model == "sim" {
						simRead, simRan = simRead+u.CacheReadInputTokens, simRan+1
					}
				})
			}
		}
	}
	if simRan > 1 && simRead == 0 {
		t.Error("the sim reported no cache reads: the cache-read price was never applied to it")
	}

	// An answer from layer0's response cache called no engine: it costs nothing, and says so.
	t.Run("simc/anthropic/cache-hit", func(t *testing.T) {
		c := spendCase{model: "simc", client: "anthropic"}
		first := spendSend(t, base, spendSecret, c)
		miss := spendLogLine(t, access, first.id)
		before := metricValue(t, base, "layer0_cost_total", `model="simc"`, `key="a"`, `team="research"`)
		seen := spendSend(t, base, spendSecret, c)
		hit := spendLogLine(t, access, seen.id)
		tr := spendTrace(t, base, seen.id)
		after := metricValue(t, base, "layer0_cost_total", `model="simc"`, `key="a"`, `team="research"`)
		cost, err := money.Parse(string(miss.Cost))
		if u := spendUsage(miss.In, miss.Out, miss.CacheW, miss.CacheRead); err != nil || miss.Cache != "miss" ||
			cost != spendPrices["simc"].price().Cost(u, 0) || cost != money.Micros(before*float64(money.Unit)+0.5) {
			t.Errorf("the answer stored: cache %q, cost %s (%v) for %+v, metric %v", miss.Cache, miss.Cost, err, u, before)
		}
		if hit.Cache != "hit" || string(hit.Cost) != "0.000000" || seen.costHeader != "0.000000" || tr.Cost != "0.000000" || after != before {
			t.Errorf("a cache hit: cache %q, logged cost %s, X-Layer0-Cost %q, trace cost %q, layer0_cost_total %v → %v; want 0 everywhere",
				hit.Cache, hit.Cost, seen.costHeader, tr.Cost, before, after)
		}
	})
}

// spendSecret is the key of the cost tests, of team "research".
const spendSecret = "l0-spend-usage"

// spendPrices are the cost tests' models' prices: each its own, so a cost computed at another
// model's would show.
var spendPrices = map[string]spendPriceRow{
	"sim":  {1, 5, 1.25, 0.1},
	"oai":  {2.5, 10, 2.5, 1.25},
	"anth": {3, 15, 3.75, 0.3},
	"peer": {0.5, 2, 0.5, 0.05},
	"edge": {0.75, 4, 1, 0.075},
	"simc": {1, 5, 1.25, 0.1},
}

// spendGateway serves a model of each engine kind, priced by spendPrices, traced, with the
// spend header on, and returns its base URL and access log: "sim", "oai" (a fake
// OpenAI-compatible engine), "anth" (a fake Anthropic engine), "peer" (another layer0 as an
// OpenAI-compatible engine serving the Responses API), "edge" (the same as a layer0 peer) and
// "simc" (the sim behind the response cache).
func spendGateway(t *testing.T) (string, *syncbuf.Buffer) {
	t.Helper()
	oaiEng := fake.NewOpenAI(fake.Script{Text: spendText, Gap: 10 * time.Millisecond, PromptTokens: oaiPrompt, CachedTokens: oaiCached})
	t.Cleanup(oaiEng.Close)
	anthEng := fake.NewAnthropic(fake.Script{Text: spendText, Gap: 10 * time.Millisecond, PromptTokens: anthInput,
		CachedTokens: anthRead, CacheWriteTokens: anthWritten})
	t.Cleanup(anthEng.Close)
	peer := startGateway(t, "engines:\n  sim: {kind: sim, sim: {inter_token_latency: 15ms}}\nmodels:\n  sim: {engines: [sim]}\n")
	access := new(syncbuf.Buffer)
	_, base := serveGateway(t, parseConfig(t, fmt.Sprintf(`
debug: {requests: 100}
keys:
  - {name: a, hash: %s, team: research}
  - {name: ops, hash: %s, admin: true}
teams:
  research: {budgets: [{amount: 1000, period: day}]}
prices:
  sim: %s
  oai: %s
  anth: %s
  peer: %s
  edge: %s
  simc: %s
spend: {header: true}
engines:
  sim: {kind: sim, sim: {inter_token_latency: 15ms}}
  oai: {kind: openai, url: %q}
  anth: {kind: anthropic, url: %q}
  peer: {kind: openai, url: %q, responses: true}
  edge: {kind: layer0, url: %q}
models:
  sim: {engines: [sim]}
  oai: {engines: [oai]}
  anth: {engines: [anth]}
  peer: {engines: [peer], upstream_model: sim}
  edge: {engines: [edge], upstream_model: sim}
  simc: {engines: [sim], cache: {enabled: true, ttl: 1m, cache_sampled: true}}
`, authHash(spendSecret), authHash(spendAdmin), spendPrices["sim"], spendPrices["oai"], spendPrices["anth"], spendPrices["peer"],
		spendPrices["edge"], spendPrices["simc"], oaiEng.URL, anthEng.URL, peer, peer)),
		layer0.WithAccessLog(access))
	return base, access
}

// spendCheck sends c's request and checks its cost against the usage its engine reported, in
// the access log, the trace, the metric and X-Layer0-Cost; it returns the usage billed.
func spendCheck(t *testing.T, base string, access *syncbuf.Buffer, c spendCase) llm.Usage {
	t.Helper()
	model := c.model
	before, _ := findMetric(t, base, "layer0_cost_total", `model="`+model+`"`, `key="a"`, `team="research"`)
	seen := spendSend(t, base, spendSecret, c)
	logged := spendLogLine(t, access, seen.id)
	tr := spendTrace(t, base, seen.id)
	u := spendUsage(logged.In, logged.Out, logged.CacheW, logged.CacheRead)

	// The usage billed is the engine's own.
	want, exact := spendEngineUsage(c, seen)
	switch {
	case exact && u != want:
		t.Errorf("usage billed %+v; the engine reported %+v", u, want)
	case !exact && (u.InputTokens+u.CacheReadInputTokens <= 0 || u.CacheCreationInputTokens != want.CacheCreationInputTokens ||
		(want.InputTokens > 0 && (u.InputTokens != want.InputTokens || u.CacheReadInputTokens != want.CacheReadInputTokens))):
		t.Errorf("usage billed %+v; want the prompt the engine reported (%+v), else the tokenizer's count", u, want)
	}
	if c.hangUp && (u.OutputTokens < seen.deltas || u.OutputTokens > seen.deltas+spendInFlow || u.OutputTokens != tr.Deltas) {
		t.Errorf("a client that hung up after %d deltas: billed %d output tokens, the trace counts %d deltas sent; want those sent (%d to %d)",
			seen.deltas, u.OutputTokens, tr.Deltas, seen.deltas, seen.deltas+spendInFlow)
	}
	if !c.hangUp && seen.reported && !spendSameReport(c, seen.usage, u) {
		t.Errorf("the client was told usage %+v; billed %+v", seen.usage, u)
	}

	// The cost is the price table applied to it, the same in every place.
	cost, err := money.Parse(string(logged.Cost))
	if err != nil {
		t.Fatalf("access log cost %q: %v", logged.Cost, err)
	}
	if p := spendPrices[model].price(); cost != p.Cost(u, 0) || cost <= 0 {
		t.Errorf("access log: cost %s for %+v; the price table says %s", cost, u, p.Cost(u, 0))
	}
	if logged.Team != "research" || logged.Model != model {
		t.Errorf("access log: team %q model %q", logged.Team, logged.Model)
	}
	if tr.Cost != cost.String() || tr.Team != "research" ||
		tr.Usage != (trace.Usage{Input: u.InputTokens, Output: u.OutputTokens, CacheRead: u.CacheReadInputTokens, CacheCreation: u.CacheCreationInputTokens}) {
		t.Errorf("trace: cost %q team %q usage %+v; the log has %s for %+v", tr.Cost, tr.Team, tr.Usage, cost, u)
	}
	after := metricValue(t, base, "layer0_cost_total", `model="`+model+`"`, `key="a"`, `team="research"`)
	if d := after - before - float64(cost)/float64(money.Unit); d > 1e-9 || d < -1e-9 {
		t.Errorf("layer0_cost_total grew by %v; want %s", after-before, cost)
	}
	switch {
	case !c.stream && seen.costHeader != cost.String():
		t.Errorf("X-Layer0-Cost %q on an answer written whole; want %s", seen.costHeader, cost)
	case c.stream && seen.costHeader != "":
		t.Errorf("X-Layer0-Cost %q on a stream, whose headers leave before its cost is known", seen.costHeader)
	}
	t.Logf("%s: usage %+v, cost %s, pass-through %v", c, u, cost, tr.Passed)
	return u
}

// spendPriceRow is a model's prices per million tokens: input, output, cache write, cache read.
type spendPriceRow [4]float64

// String is the row as the configuration writes it.
func (r spendPriceRow) String() string {
	return fmt.Sprintf("{input: %v, output: %v, cache_write: %v, cache_read: %v}", r[0], r[1], r[2], r[3])
}

func (r spendPriceRow) price() (p spend.Price) {
	m := func(f float64) money.Micros { return money.Micros(f*1e6 + 0.5) }
	p.Input, p.Output, p.CacheWrite, p.CacheRead = m(r[0]), m(r[1]), m(r[2]), m(r[3])
	return p
}

// spendEngineUsage is the usage the engine reported, by construction of the fakes or as the
// client read it from the sim, and whether it is exact: a stream cut short on an engine that
// reports its usage only at the end (an OpenAI-compatible one) has only the tokenizer's count
// of its prompt, which the test cannot know to the token.
func spendEngineUsage(c spendCase, seen spendSeen) (llm.Usage, bool) {
	var u llm.Usage
	switch c.model {
	case "oai":
		if c.hangUp {
			return u, false
		}
		u = spendUsage(oaiPrompt-oaiCached, spendWords, 0, oaiCached)
	case "anth":
		u = spendUsage(anthInput, spendWords, anthWritten, anthRead)
	case "peer":
		if c.hangUp {
			return u, false
		}
		u = seen.usage
	case "sim", "edge":
		if c.hangUp {
			// An Anthropic client read the sim's prompt counts in message_start (the edge's
			// engine, another layer0, passes its message_start through).
			u = seen.usage
			u.OutputTokens = 0
			return u, false
		}
		u = seen.usage
	}
	if c.hangUp {
		u.OutputTokens = 0
		return u, false
	}
	return u, true
}

// spendSameReport reports whether the usage the client was told, in its format, is billed.
// OpenAI's formats count a prompt's cache reads and writes within their prompt tokens.
func spendSameReport(c spendCase, told, billed llm.Usage) bool {
	if c.client == "anthropic" {
		return told == billed
	}
	return told.InputTokens == billed.InputTokens+billed.CacheCreationInputTokens &&
		told.CacheReadInputTokens == billed.CacheReadInputTokens && told.OutputTokens == billed.OutputTokens
}

// spendLine is what the tests read of an access-log record.
type spendLine struct {
	ID        string          `json:"request_id"`
	Status    int             `json:"status"`
	Model     string          `json:"model"`
	Cost      json.RawMessage `json:"cost"`
	In        int             `json:"input_tokens"`
	Out       int             `json:"output_tokens"`
	CacheRead int             `json:"cache_read_input_tokens"`
	CacheW    int             `json:"cache_creation_input_tokens"`
	Team      string          `json:"team"`
	Cache     string          `json:"cache"`
}

// spendLogLine waits for the access-log record of request id (written by a goroutine of its
// own, a moment after the answer).
func spendLogLine(t *testing.T, access *syncbuf.Buffer, id string) spendLine {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		for _, line := range access.Lines() {
			var l spendLine
			if json.Unmarshal([]byte(line), &l) == nil && l.ID == id {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no access-log record of request %q", id)
		}
	}
}

// spendTrace reads request id's decision trace with the admin key.
func spendTrace(t *testing.T, base, id string) trace.Trace {
	t.Helper()
	var tr trace.Trace
	for deadline := time.Now().Add(10 * time.Second); getJSON(t, base+"/debug/requests/"+id, spendAdmin, &tr) != http.StatusOK; {
		if time.Now().After(deadline) {
			t.Fatalf("no trace of request %q", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return tr
}

// spendSend sends c's request through the official SDK of its format and returns what the
// client saw.
func spendSend(t *testing.T, base, secret string, c spendCase) spendSeen {
	t.Helper()
	var seen spendSeen
	var mu sync.Mutex
	capture := func(resp *http.Response) {
		if resp != nil {
			mu.Lock()
			seen.id, seen.costHeader = resp.Header.Get("Request-Id"), resp.Header.Get("X-Layer0-Cost")
			mu.Unlock()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const prompt = "Count to twelve, please."
	enough := func() bool { return c.hangUp && seen.deltas == spendCut }
	var err error
	switch c.client {
	case "anthropic":
		ac := anthropic.NewClient(option.WithBaseURL(base), option.WithAPIKey(secret), option.WithMaxRetries(0),
			option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
				resp, err := next(r)
				capture(resp)
				return resp, err
			}))
		p := anthropic.MessageNewParams{Model: anthropic.Model(c.model), MaxTokens: 32,
			System: []anthropic.TextBlockParam{{Text: spendSystem}}, Messages: userText(prompt)}
		var msg anthropic.Message
		if !c.stream {
			var m *anthropic.Message
			if m, err = ac.Messages.New(ctx, p); err == nil {
				msg = *m
			}
		} else {
			s := ac.Messages.NewStreaming(ctx, p)
			for s.Next() {
				ev := s.Current()
				if aerr := msg.Accumulate(ev); aerr != nil {
					t.Fatal(aerr)
				}
				if ev.Type == "content_block_delta" {
					seen.deltas++
				}
				if ev.Type == "message_stop" {
					seen.reported = true
				}
				if enough() {
					cancel()
					break
				}
			}
			s.Close()
			if !c.hangUp {
				err = s.Err()
			}
		}
		seen.usage = spendUsage(int(msg.Usage.InputTokens), int(msg.Usage.OutputTokens),
			int(msg.Usage.CacheCreationInputTokens), int(msg.Usage.CacheReadInputTokens))
		seen.reported = seen.reported || !c.stream && err == nil
	case "chat", "responses":
		oc := oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey(secret), oaiopt.WithMaxRetries(0),
			oaiopt.WithMiddleware(func(r *http.Request, next oaiopt.MiddlewareNext) (*http.Response, error) {
				resp, err := next(r)
				capture(resp)
				return resp, err
			}))
		if c.client == "chat" {
			seen.usage, seen.reported, err = spendChat(ctx, &oc, c, prompt, &seen.deltas, enough, cancel)
		} else {
			seen.usage, seen.reported, err = spendResponses(ctx, &oc, c, prompt, &seen.deltas, enough, cancel)
		}
	}
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	if c.hangUp && seen.deltas != spendCut {
		t.Fatalf("%s: the stream ended after %d deltas, before the client hung up", c, seen.deltas)
	}
	if seen.id == "" {
		t.Fatalf("%s: no Request-Id", c)
	}
	return seen
}

// spendChat sends a Chat Completions request (a stream asking for its usage).
func spendChat(ctx context.Context, oc *oai.Client, c spendCase, prompt string, deltas *int, enough func() bool, cancel func()) (llm.Usage, bool, error) {
	p := oai.ChatCompletionNewParams{Model: c.model, MaxTokens: oai.Int(32),
		Messages: []oai.ChatCompletionMessageParamUnion{oai.SystemMessage(spendSystem), oai.UserMessage(prompt)}}
	var u oai.CompletionUsage
	reported := false
	if !c.stream {
		r, err := oc.Chat.Completions.New(ctx, p)
		if err != nil {
			return llm.Usage{}, false, err
		}
		u, reported = r.Usage, true
	} else {
		p.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
		s := oc.Chat.Completions.NewStreaming(ctx, p)
		for s.Next() {
			ch := s.Current()
			if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
				*deltas++
			}
			if ch.JSON.Usage.Valid() && ch.Usage.PromptTokens > 0 {
				u, reported = ch.Usage, true
			}
			if enough() {
				cancel()
				break
			}
		}
		s.Close()
		if !c.hangUp && s.Err() != nil {
			return llm.Usage{}, false, s.Err()
		}
	}
	cached := int(u.PromptTokensDetails.CachedTokens)
	return spendUsage(int(u.PromptTokens)-cached, int(u.CompletionTokens), 0, cached), reported, nil
}

// spendResponses sends a Responses request.
func spendResponses(ctx context.Context, oc *oai.Client, c spendCase, prompt string, deltas *int, enough func() bool, cancel func()) (llm.Usage, bool, error) {
	p := responses.ResponseNewParams{Model: c.model, Instructions: oai.String(spendSystem), MaxOutputTokens: oai.Int(32), Store: oai.Bool(false),
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String(prompt)}}
	var u responses.ResponseUsage
	reported := false
	if !c.stream {
		r, err := oc.Responses.New(ctx, p)
		if err != nil {
			return llm.Usage{}, false, err
		}
		u, reported = r.Usage, true
	} else {
		s := oc.Responses.NewStreaming(ctx, p)
		for s.Next() {
			ev := s.Current()
			switch ev.Type {
			case "response.output_text.delta":
				*deltas++
			case "response.completed", "response.incomplete":
				u, reported = ev.Response.Usage, true
			}
			if enough() {
				cancel()
				break
			}
		}
		s.Close()
		if !c.hangUp && s.Err() != nil {
			return llm.Usage{}, false, s.Err()
		}
	}
	cached := int(u.InputTokensDetails.CachedTokens)
	return spendUsage(int(u.InputTokens)-cached, int(u.OutputTokens), 0, cached), reported, nil
}
