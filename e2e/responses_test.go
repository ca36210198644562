package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/layer0ai/layer0/internal/store/redistest"
)

// The OpenAI Responses API through the official Go SDK's Responses client, on every engine kind
// (the sim, an OpenAI-format engine, an Anthropic engine, another layer0): text, tool calls over
// two turns continued by previous_response_id, streaming with the event sequence, stored
// responses owned by their key, and errors.

func responsesClient(base, key string) oai.Client {
	return oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey(key), oaiopt.WithMaxRetries(0))
}

// respTurn is what one Responses call returned.
type respTurn struct {
	id, status, text string
	call             responses.ResponseFunctionToolCall
	input, output    int64
}

// responsesCall makes one call, streamed or not, and checks the stream's event sequence.
func responsesCall(ctx context.Context, t *testing.T, c *oai.Client, p responses.ResponseNewParams, stream bool) respTurn {
	t.Helper()
	var r *responses.Response
	if !stream {
		var err error
		if r, err = c.Responses.New(ctx, p); err != nil {
			t.Fatalf("responses.New: %v", err)
		}
	} else {
		r = streamResponse(t, c.Responses.NewStreaming(ctx, p))
	}
	tr := respTurn{id: r.ID, status: string(r.Status), text: r.OutputText(), input: r.Usage.InputTokens, output: r.Usage.OutputTokens}
	for _, it := range r.Output {
		if it.Type == "function_call" {
			tr.call = it.AsFunctionCall()
		}
	}
	if !strings.HasPrefix(r.ID, "resp_") || r.Model != p.Model {
		t.Errorf("got id %q model %q, want resp_… and %q", r.ID, r.Model, p.Model)
	}
	return tr
}

// streamResponse reads a Responses stream to its end, checking that sequence numbers count from
// 0 without a gap, that it opens with response.created and response.in_progress and ends with
// response.completed, that every delta belongs to an item that was added, and that the deltas
// add up to the final text and arguments. It returns the final response.
func streamResponse(t *testing.T, s interface {
	Next() bool
	Current() responses.ResponseStreamEventUnion
	Err() error
}) *responses.Response {
	t.Helper()
	var types []string
	var final *responses.Response
	texts := map[string]*strings.Builder{}
	args := map[string]*strings.Builder{}
	for i := int64(0); s.Next(); i++ {
		ev := s.Current()
		if ev.SequenceNumber != i {
			t.Fatalf("event %d (%s): sequence_number %d", i, ev.Type, ev.SequenceNumber)
		}
		types = append(types, ev.Type)
		switch ev.Type {
		case "response.output_item.added":
			if ev.Item.Type == "function_call" {
				args[ev.Item.ID] = new(strings.Builder)
			} else {
				texts[ev.Item.ID] = new(strings.Builder)
			}
		case "response.output_text.delta":
			b := texts[ev.ItemID]
			if b == nil {
				t.Fatalf("text delta for item %q that was not added", ev.ItemID)
			}
			b.WriteString(ev.Delta)
		case "response.output_text.done":
			if got := texts[ev.ItemID].String(); got != ev.Text {
				t.Errorf("output_text.done text %q, deltas %q", ev.Text, got)
			}
		case "response.function_call_arguments.delta":
			b := args[ev.ItemID]
			if b == nil {
				t.Fatalf("arguments delta for item %q that was not added", ev.ItemID)
			}
			b.WriteString(ev.Delta)
		case "response.function_call_arguments.done":
			if got := args[ev.ItemID].String(); got != ev.Arguments {
				t.Errorf("arguments.done %q, deltas %q", ev.Arguments, got)
			}
		case "response.completed", "response.incomplete":
			r := ev.Response
			final = &r
		case "error", "response.failed":
			t.Fatalf("stream failed: %s %s", ev.Type, ev.Message)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if len(types) < 3 || types[0] != "response.created" || types[1] != "response.in_progress" || final == nil {
		t.Fatalf("events %v: want response.created, response.in_progress … response.completed", types)
	}
	return final
}

var weatherFunction = responses.ToolParamOfFunction("get_weather", weatherSchema, false)

// TestResponsesCrossEngine runs the Responses client against every engine kind: a text answer,
// and a tool call whose result goes back in a second turn that names the first by
// previous_response_id, streamed and not.
func TestResponsesCrossEngine(t *testing.T) {
	base := crossGateway(t)
	c := responsesClient(base, "test-key")
	for _, model := range []string{"sim", "vllm", "claude", "chain"} {
		for _, stream := range []bool{false, true} {
			for _, tools := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/stream=%v/tools=%v", model, stream, tools), func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					p := responses.ResponseNewParams{Model: model, Instructions: oai.String("You are terse."),
						MaxOutputTokens: oai.Int(200), Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("Say hello.")}}
					if !tools {
						tr := responsesCall(ctx, t, &c, p, stream)
						if tr.status != "completed" || tr.text == "" || tr.input == 0 || tr.output == 0 {
							t.Errorf("got %+v, want a completed text answer with usage", tr)
						}
						if model != "sim" && tr.text != "Hello from the fake engine." {
							t.Errorf("got text %q", tr.text)
						}
						return
					}
					p.Input.OfString = oai.String(toolPrompt)
					p.Tools = []responses.ToolUnionParam{weatherFunction}
					first := responsesCall(ctx, t, &c, p, stream)
					if first.call.Name != "get_weather" || first.call.CallID == "" {
						t.Fatalf("got %+v, want a get_weather call", first)
					}
					var a map[string]any
					if err := json.Unmarshal([]byte(first.call.Arguments), &a); err != nil {
						t.Errorf("arguments %q: %v", first.call.Arguments, err)
					}
					if model != "sim" && a["city"] != "Paris" {
						t.Errorf("got arguments %v", a)
					}
					out := responses.ResponseInputItemParamOfFunctionCallOutput("Sunny, 21 degrees.")
					out.OfFunctionCallOutput.CallID = oai.String(first.call.CallID)
					p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{out}}
					p.PreviousResponseID = oai.String(first.id)
					second := responsesCall(ctx, t, &c, p, stream)
					if second.status != "completed" || second.text == "" || second.call.Name != "" {
						t.Errorf("after the tool result: got %+v, want a text answer", second)
					}
				})
			}
		}
	}
}

const responsesKeysConfig = `
keys:
  - {name: alice, hash: %s}
  - {name: bob, hash: %s}
engines:
  sim: {kind: sim}
models:
  sim: {engines: [sim]}
`

// TestResponsesStoredPerKey: a stored response is the key's own. Its owner reads it, continues
// it and deletes it; another key gets 404 for all three, as for an id that never existed; a
// response made with store false is not kept.
func TestResponsesStoredPerKey(t *testing.T) {
	base := startGateway(t, fmt.Sprintf(responsesKeysConfig, authHash("alice-key"), authHash("bob-key")))
	alice, bob := responsesClient(base, "alice-key"), responsesClient(base, "bob-key")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	text := func(s string) responses.ResponseNewParamsInputUnion {
		return responses.ResponseNewParamsInputUnion{OfString: oai.String(s)}
	}
	first, err := alice.Responses.New(ctx, responses.ResponseNewParams{Model: "sim", Input: text("My name is Ada.")})
	if err != nil {
		t.Fatal(err)
	}
	got, err := alice.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	if err != nil || got.ID != first.ID || got.OutputText() != first.OutputText() {
		t.Fatalf("owner's GET: got %v, %v; want the stored response", got, err)
	}
	wantNotFound := func(what string, err error) {
		t.Helper()
		var e *oai.Error
		if !errors.As(err, &e) || e.StatusCode != http.StatusNotFound || e.Type != "invalid_request_error" {
			t.Errorf("%s: got %v, want a 404 invalid_request_error", what, err)
		}
	}
	_, err = bob.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	wantNotFound("another key's GET", err)
	_, err = bob.Responses.New(ctx, responses.ResponseNewParams{Model: "sim", Input: text("What is my name?"),
		PreviousResponseID: oai.String(first.ID)})
	wantNotFound("another key's previous_response_id", err)
	wantNotFound("another key's DELETE", bob.Responses.Delete(ctx, first.ID))
	_, err = alice.Responses.Get(ctx, "resp_never", responses.ResponseGetParams{})
	wantNotFound("an unknown id", err)

	// The owner continues: the sim in echo mode is not configured here, so the continuation is
	// checked by its input token count, which holds the first turn and its answer.
	second, err := alice.Responses.New(ctx, responses.ResponseNewParams{Model: "sim", Input: text("What is my name?"),
		PreviousResponseID: oai.String(first.ID)})
	if err != nil {
		t.Fatal(err)
	}
	alone, err := alice.Responses.New(ctx, responses.ResponseNewParams{Model: "sim", Input: text("What is my name?"),
		Store: oai.Bool(false)})
	if err != nil {
		t.Fatal(err)
	}
	if second.PreviousResponseID != first.ID || second.Usage.InputTokens <= alone.Usage.InputTokens+first.Usage.OutputTokens-1 {
		t.Errorf("continuation: previous_response_id %q, %d input tokens (alone %d, first answer %d): want the first turn included",
			second.PreviousResponseID, second.Usage.InputTokens, alone.Usage.InputTokens, first.Usage.OutputTokens)
	}
	_, err = alice.Responses.Get(ctx, alone.ID, responses.ResponseGetParams{})
	wantNotFound("a response made with store false", err)

	if err := alice.Responses.Delete(ctx, first.ID); err != nil {
		t.Fatalf("owner's DELETE: %v", err)
	}
	_, err = alice.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	wantNotFound("a deleted response", err)
}

// TestResponsesErrors checks the error bodies the SDK parses, and that a failure after the
// stream began ends it with an error event and response.failed.
func TestResponsesErrors(t *testing.T) {
	base := startGateway(t, testConfig)
	c := responsesClient(base, "test-key")
	ctx := context.Background()
	in := responses.ResponseNewParamsInputUnion{OfString: oai.String("hi")}
	tests := []struct {
		name   string
		params responses.ResponseNewParams
		status int
		code   string
		param  string
	}{
		{"unknown model", responses.ResponseNewParams{Model: "nope", Input: in}, 404, "model_not_found", "model"},
		{"no input", responses.ResponseNewParams{Model: "sim"}, 400, "", "input"},
		{"temperature", responses.ResponseNewParams{Model: "sim", Input: in, Temperature: oai.Float(3)}, 400, "", "temperature"},
		{"unknown previous response", responses.ResponseNewParams{Model: "sim", Input: in, PreviousResponseID: oai.String("resp_x")},
			404, "", "previous_response_id"},
		{"named tool missing", responses.ResponseNewParams{Model: "sim", Input: in, Tools: []responses.ToolUnionParam{weatherFunction},
			ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: "nope"}}},
			400, "", "tool_choice.name"},
		{"rate limited", responses.ResponseNewParams{Model: "e429", Input: in}, 429, "rate_limit_exceeded", ""},
		{"overloaded", responses.ResponseNewParams{Model: "e529", Input: in}, 503, "server_is_overloaded", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Responses.New(ctx, tt.params)
			var e *oai.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want *openai.Error", err)
			}
			if e.StatusCode != tt.status || e.Code != tt.code || e.Param != tt.param || e.Message == "" {
				t.Errorf("got status %d code %q param %q message %q, want %d %q %q",
					e.StatusCode, e.Code, e.Param, e.Message, tt.status, tt.code, tt.param)
			}
		})
	}

	t.Run("midstream", func(t *testing.T) {
		s := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "midstream", Input: in})
		var types []string
		var failed responses.Response
		for n := 0; s.Next() && n < 1000; n++ {
			ev := s.Current()
			types = append(types, ev.Type)
			if ev.Type == "response.failed" {
				failed = ev.Response
			}
		}
		if len(types) < 2 || types[len(types)-2] != "error" || types[len(types)-1] != "response.failed" {
			t.Fatalf("events %v: want the stream to end with error and response.failed", types)
		}
		if failed.Status != "failed" || failed.Error.Message == "" {
			t.Errorf("response.failed: status %q error %+v", failed.Status, failed.Error)
		}
	})
}

// TestResponsesSharedOnRedis: with responses.shared on a real Redis, a response stored through
// one replica is read, continued and deleted through another, and stays its key's own there.
func TestResponsesSharedOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	bases := replicas(t, 2, srv, "timeout: 1s", fmt.Sprintf(responsesKeysConfig, authHash("alice-key"), authHash("bob-key"))+
		"responses: {shared: true}\n")
	a, b := responsesClient(bases[0], "alice-key"), responsesClient(bases[1], "alice-key")
	bob := responsesClient(bases[1], "bob-key")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first, err := a.Responses.New(ctx, responses.ResponseNewParams{Model: "sim",
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("Remember this.")}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.Responses.Get(ctx, first.ID, responses.ResponseGetParams{}); err != nil || got.OutputText() != first.OutputText() {
		t.Fatalf("GET on the other replica: %v, %v", got, err)
	}
	second, err := b.Responses.New(ctx, responses.ResponseNewParams{Model: "sim", PreviousResponseID: oai.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("And now?")}})
	if err != nil || second.PreviousResponseID != first.ID {
		t.Fatalf("continued on the other replica: %v, %v", second, err)
	}
	var e *oai.Error
	if _, err := bob.Responses.Get(ctx, first.ID, responses.ResponseGetParams{}); !errors.As(err, &e) || e.StatusCode != http.StatusNotFound {
		t.Errorf("another key's GET: got %v, want 404", err)
	}
	if err := b.Responses.Delete(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Responses.Get(ctx, first.ID, responses.ResponseGetParams{}); !errors.As(err, &e) || e.StatusCode != http.StatusNotFound {
		t.Errorf("GET after DELETE on the other replica: got %v, want 404", err)
	}
}

// TestResponsesPassThrough: an openai engine with responses: true (here another layer0, which
// serves the Responses API) gets a Responses request that keeps no state as the client sent it,
// and its answer comes back unchanged but for the model name; a stored one is translated, and
// stays layer0's.
func TestResponsesPassThrough(t *testing.T) {
	inner := startGateway(t, "engines:\n  sim: {kind: sim}\nmodels:\n  inner: {engines: [sim]}\n")
	base := startGateway(t, fmt.Sprintf(`
engines:
  up: {kind: openai, url: %q, responses: true}
models:
  passed: {engines: [up], upstream_model: inner}
`, inner))
	post := func(body string) (*http.Response, map[string]any) {
		t.Helper()
		resp, err := http.Post(base+"/v1/responses", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %v %v", resp.StatusCode, v, err)
		}
		return resp, v
	}
	// Passed through: the id is the engine's, not the one layer0 made for the request.
	resp, v := post(`{"model":"passed","input":"hi","store":false}`)
	if v["id"] == resp.Header.Get("X-Layer0-Response-Id") || v["model"] != "passed" || v["status"] != "completed" {
		t.Errorf("store false: id %v (layer0's %s), model %v, status %v: want the engine's answer under the client's model",
			v["id"], resp.Header.Get("X-Layer0-Response-Id"), v["model"], v["status"])
	}
	// Translated and stored: layer0's id, readable from layer0.
	resp, v = post(`{"model":"passed","input":"hi"}`)
	if v["id"] != resp.Header.Get("X-Layer0-Response-Id") {
		t.Errorf("store true: id %v, want layer0's %s", v["id"], resp.Header.Get("X-Layer0-Response-Id"))
	}
	c := responsesClient(base, "test-key")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Responses.Get(ctx, v["id"].(string), responses.ResponseGetParams{}); err != nil {
		t.Errorf("GET of the translated response: %v", err)
	}
	// A stream passed through, read by the SDK.
	r := streamResponse(t, c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "passed", Store: oai.Bool(false),
		Input: responses.ResponseNewParamsInputUnion{OfString: oai.String("Say hello.")}}))
	if r.Model != "passed" || r.OutputText() == "" || r.Usage.OutputTokens == 0 {
		t.Errorf("streamed: model %q text %q usage %+v", r.Model, r.OutputText(), r.Usage)
	}
}
