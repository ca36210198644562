package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/layer0ai/layer0/client"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// directivesGateway serves a sim model, a model on a fake OpenAI-compatible engine, one on a
// fake Anthropic engine, and two offload targets.
func directivesGateway(t *testing.T) (base string, vllm, claude *fake.Server) {
	t.Helper()
	vllm = fake.NewOpenAI(fake.Script{Text: "Hello from the fake engine."})
	claude = fake.NewAnthropic(fake.Script{Text: `"status": "ok"}`})
	t.Cleanup(vllm.Close)
	t.Cleanup(claude.Close)
	base = startGateway(t, fmt.Sprintf(`
engines:
  sim: {kind: sim}
  big: {kind: sim}
  vllm: {kind: openai, url: %q}
  claude: {kind: anthropic, url: %q}
models:
  sim: {engines: [sim]}
  large: {engines: [big]}
  vllm: {engines: [vllm]}
  claude: {engines: [claude]}
offload_targets:
  batch: {model: large}
  fast: {model: sim}
`, vllm.URL, claude.URL))
	return base, vllm, claude
}

// lastBody decodes the last request a fake engine received.
func lastBody(t *testing.T, s *fake.Server) map[string]any {
	t.Helper()
	reqs := s.Requests()
	if len(reqs) == 0 {
		t.Fatal("the engine received no request")
	}
	var m map[string]any
	if err := json.Unmarshal(reqs[len(reqs)-1].Body, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestDirectivesAnthropicClient sends directives through the Anthropic SDK: they reach the
// engine applied and stripped, and win over the request's own fields.
func TestDirectivesAnthropicClient(t *testing.T) {
	base, vllm, _ := directivesGateway(t)
	c := anthropicClient(base)
	ctx := context.Background()
	_, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "vllm", MaxTokens: 20, Temperature: anthropic.Float(0.9),
		System:   []anthropic.TextBlockParam{{Text: "<|temperature:0.2|>\n<|json_mode|>\nBe brief. <|im_start|> stays."}},
		Messages: userText("hi")})
	if err != nil {
		t.Fatal(err)
	}
	body := lastBody(t, vllm)
	msgs := body["messages"].([]any)
	if sys := msgs[0].(map[string]any); sys["role"] != "system" || sys["content"] != "Be brief. <|im_start|> stays." {
		t.Errorf("system message at the engine: %v, want the directives stripped and the look-alike kept", sys)
	}
	if body["temperature"] != 0.2 {
		t.Errorf("temperature at the engine: %v, want the directive's 0.2 over the field's 0.9", body["temperature"])
	}
	if rf, _ := body["response_format"].(map[string]any); rf["type"] != "json_object" {
		t.Errorf("response_format at the engine: %v, want json_object", body["response_format"])
	}

	// A bad value: a 400 in Anthropic's shape naming the directive; 1.5 is above Anthropic's range.
	for _, sys := range []string{"<|temperature:1.5|>", "<|truncate:many|>", "<|offload:nowhere|>", "<|json_mode:maybe|>"} {
		_, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "sim", MaxTokens: 5,
			System: []anthropic.TextBlockParam{{Text: sys + " hi"}}, Messages: userText("hi")})
		var e *anthropic.Error
		name := sys[2 : 2+strings.IndexByte(sys[2:], ':')]
		if !errors.As(err, &e) || e.StatusCode != 400 || !strings.Contains(e.RawJSON(), `"invalid_request_error"`) ||
			!strings.Contains(e.RawJSON(), name) {
			t.Errorf("%s: got %v, want a 400 invalid_request_error naming %s", sys, err, name)
		}
	}
}

// TestDirectivesOpenAIClient sends directives in OpenAI system and developer messages.
func TestDirectivesOpenAIClient(t *testing.T) {
	base, vllm, _ := directivesGateway(t)
	c := openAIClient(base)
	ctx := context.Background()
	_, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "vllm", Temperature: oai.Float(0.1),
		Messages: []oai.ChatCompletionMessageParamUnion{oai.SystemMessage("Be brief."), oai.DeveloperMessage("<|temperature:1.5|>"), oai.UserMessage("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	body := lastBody(t, vllm)
	if sys := body["messages"].([]any)[0].(map[string]any); sys["content"] != "Be brief." {
		t.Errorf("system at the engine: %q, want the developer message's directive gone with its block", sys["content"])
	}
	if body["temperature"] != 1.5 {
		t.Errorf("temperature at the engine: %v, want 1.5 (OpenAI allows up to 2)", body["temperature"])
	}
	if _, ok := body["response_format"]; ok {
		t.Errorf("response_format sent without json_mode: %v", body["response_format"])
	}

	// json_mode off wins over the request's response_format.
	_, err = c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "vllm",
		ResponseFormat: oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}},
		Messages:       []oai.ChatCompletionMessageParamUnion{oai.SystemMessage("<|json_mode:false|>"), oai.UserMessage("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	if body := lastBody(t, vllm); body["response_format"] != nil {
		t.Errorf("response_format at the engine: %v, want none (the directive turned it off)", body["response_format"])
	}

	_, err = c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "sim",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.SystemMessage("<|temperature:2.5|>"), oai.UserMessage("hi")}})
	var e *oai.Error
	if !errors.As(err, &e) || e.StatusCode != 400 || e.Param != "system" || !strings.Contains(e.Message, "<|temperature|>") {
		t.Errorf("temperature 2.5: got %v, want a 400 with param system naming the directive", err)
	}
}

// TestDirectiveJSONMode checks json_mode on every engine kind: the sim answers JSON (matching
// a schema when one is given), an OpenAI engine gets response_format, an Anthropic engine the
// instruction and a "{" prefill that the client sees back in front of the answer.
func TestDirectiveJSONMode(t *testing.T) {
	base, vllm, claude := directivesGateway(t)
	ac := anthropicClient(base)
	ctx := context.Background()
	for _, stream := range []bool{false, true} {
		params := anthropic.MessageNewParams{Model: "sim", MaxTokens: 200,
			System: []anthropic.TextBlockParam{{Text: "<|json_mode|>"}}, Messages: userText("Describe the weather.")}
		var text string
		if stream {
			s := ac.Messages.NewStreaming(ctx, params)
			var acc anthropic.Message
			for s.Next() {
				if err := acc.Accumulate(s.Current()); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			text = acc.Content[0].Text
		} else {
			m, err := ac.Messages.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			text = m.Content[0].Text
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(text), &v); err != nil || v["answer"] == nil {
			t.Errorf("sim in json_mode (stream %v): %q is not a JSON object with an answer (%v)", stream, text, err)
		}
	}

	// A schema through OpenAI's response_format: the sim's answer follows it.
	oc := openAIClient(base)
	schema := map[string]any{"type": "object", "required": []string{"city", "temp_c", "tags"},
		"properties": map[string]any{"city": map[string]any{"type": "string"}, "temp_c": map[string]any{"type": "integer", "minimum": -50, "maximum": 60},
			"tags": map[string]any{"type": "array", "items": map[string]any{"type": "string", "enum": []string{"sun", "rain"}}, "minItems": 1}}}
	r, err := oc.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "sim", MaxTokens: oai.Int(300),
		ResponseFormat: oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "weather", Schema: schema}}},
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Weather?")}})
	if err != nil {
		t.Fatal(err)
	}
	var w struct {
		City  *string  `json:"city"`
		TempC *int     `json:"temp_c"`
		Tags  []string `json:"tags"`
	}
	if err := json.Unmarshal([]byte(r.Choices[0].Message.Content), &w); err != nil || w.City == nil || w.TempC == nil ||
		*w.TempC < -50 || *w.TempC > 60 || len(w.Tags) == 0 || w.Tags[0] != "sun" && w.Tags[0] != "rain" {
		t.Errorf("sim with a schema: %q does not match it (%v)", r.Choices[0].Message.Content, err)
	}

	// An OpenAI-kind engine gets the schema as response_format.
	_, err = oc.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "vllm",
		ResponseFormat: oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "weather", Schema: schema, Strict: oai.Bool(true)}}},
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Weather?")}})
	if err != nil {
		t.Fatal(err)
	}
	rf, _ := lastBody(t, vllm)["response_format"].(map[string]any)
	js, _ := rf["json_schema"].(map[string]any)
	if rf["type"] != "json_schema" || js["name"] != "weather" || js["strict"] != true || js["schema"].(map[string]any)["required"] == nil {
		t.Errorf("response_format at the OpenAI engine: %v", rf)
	}

	// An Anthropic-kind engine: the instruction, the prefill, and "{" put back.
	m, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude", MaxTokens: 50,
		System: []anthropic.TextBlockParam{{Text: "Be brief.\n<|json_mode|>"}}, Messages: userText("Status?")})
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(m.Content[0].Text), &v); err != nil || v["status"] != "ok" {
		t.Errorf("anthropic engine in json_mode: the client got %q, want the JSON object with the prefill's '{' (%v)", m.Content[0].Text, err)
	}
	body := lastBody(t, claude)
	sys, _ := json.Marshal(body["system"])
	msgs := body["messages"].([]any)
	last := msgs[len(msgs)-1].(map[string]any)
	lastJSON, _ := json.Marshal(last["content"])
	if !strings.Contains(string(sys), "valid JSON object") || strings.Contains(string(sys), "<|") ||
		last["role"] != "assistant" || !strings.Contains(string(lastJSON), `"{"`) {
		t.Errorf("the anthropic engine got system %s and last message %v, want the instruction and a '{' prefill", sys, last)
	}
}

// TestDirectiveOffload sends requests to offload targets by directive and by header.
func TestDirectiveOffload(t *testing.T) {
	base, _, _ := directivesGateway(t)
	ctx := context.Background()
	engineOf := func(system string, header string) (string, error) {
		var resp *http.Response
		opts := []option.RequestOption{option.WithResponseInto(&resp)}
		if header != "" {
			opts = append(opts, option.WithHeader("X-Offload-Target", header))
		}
		p := anthropic.MessageNewParams{Model: "sim", MaxTokens: 5, Messages: userText("hi")}
		if system != "" {
			p.System = []anthropic.TextBlockParam{{Text: system}}
		}
		c := anthropicClient(base)
		_, err := c.Messages.New(ctx, p, opts...)
		if err != nil {
			return "", err
		}
		return resp.Header.Get("X-Layer0-Engine"), nil
	}
	for _, tt := range []struct {
		system, header, engine string
	}{
		{"", "", "sim"},
		{"<|offload:batch|> hi", "", "big"},
		{"", "batch", "big"},
		{"<|offload:fast|> hi", "batch", "sim"}, // the directive wins over the header
	} {
		got, err := engineOf(tt.system, tt.header)
		if err != nil || got != tt.engine {
			t.Errorf("system %q header %q: engine %q (%v), want %q", tt.system, tt.header, got, err, tt.engine)
		}
	}
	for _, header := range []string{"nowhere", "http://evil.example/v1"} {
		_, err := engineOf("", header)
		var e *anthropic.Error
		if !errors.As(err, &e) || e.StatusCode != 400 || !strings.Contains(e.RawJSON(), "not configured") {
			t.Errorf("header %q: got %v, want a 400 saying the target is not configured", header, err)
		}
	}
}

// TestContextPlanningThroughServer cuts a long document to a small model's window when the
// truncate directive or the model's config allows it, and refuses it otherwise.
func TestContextPlanningThroughServer(t *testing.T) {
	doc, err := os.ReadFile("../internal/trim/testdata/guide.md")
	if err != nil {
		t.Fatal(err)
	}
	base := startGateway(t, `
engines:
  sim: {kind: sim, sim: {mode: echo}}
models:
  small: {engines: [sim], context_window: 300}
  cutting: {engines: [sim], context_window: 300, context: {overflow: truncate, split: semantic, max_tokens_per_shard: 8192}}
`)
	c := anthropicClient(base)
	ctx := context.Background()
	send := func(model, system string) (*anthropic.Message, *http.Response, error) {
		var resp *http.Response
		p := anthropic.MessageNewParams{Model: model, MaxTokens: 2000, Messages: userText(string(doc))}
		if system != "" {
			p.System = []anthropic.TextBlockParam{{Text: system}}
		}
		m, err := c.Messages.New(ctx, p, option.WithResponseInto(&resp))
		return m, resp, err
	}
	_, _, err = send("small", "Summarize.")
	var e *anthropic.Error
	if !errors.As(err, &e) || e.StatusCode != 400 || !strings.Contains(e.RawJSON(), "prompt is too long") {
		t.Fatalf("without truncation: got %v, want the 400 stating the sizes", err)
	}
	for _, tt := range []struct{ model, system string }{{"small", "<|truncate|>\nSummarize."}, {"cutting", "Summarize."}} {
		m, resp, err := send(tt.model, tt.system)
		if err != nil {
			t.Fatalf("%s: %v", tt.model, err)
		}
		h := resp.Header.Get("X-Layer0-Context")
		var before, after int
		if _, err := fmt.Sscanf(h, "truncated; before=%d; after=%d", &before, &after); err != nil || after > 300 || before <= 300 {
			t.Errorf("%s: X-Layer0-Context %q, want truncated with before > 300 ≥ after", tt.model, h)
		}
		// The echo sim repeats what it was sent: the guide up to the end of a section.
		got := m.Content[0].Text
		if !strings.HasPrefix(string(doc), got) || !strings.HasSuffix(got, "Copy it to /usr/local/bin.") {
			t.Errorf("%s: the engine saw %d bytes ending …%q, want the guide cut after the Building section", tt.model, len(got), got[max(0, len(got)-60):])
		}
		if m.Usage.InputTokens > 300 {
			t.Errorf("%s: usage says %d input tokens", tt.model, m.Usage.InputTokens)
		}
	}
	// A budget in the directive, below the window.
	_, resp, err := send("small", "<|truncate:120|>")
	if err != nil {
		t.Fatal(err)
	}
	if h := resp.Header.Get("X-Layer0-Context"); !strings.HasPrefix(h, "truncated;") || !strings.HasSuffix(h, "after="+afterOf(h)) || atoi(afterOf(h)) > 120 {
		t.Errorf("truncate:120: X-Layer0-Context %q", h)
	}
}

func afterOf(h string) string { return h[strings.LastIndex(h, "=")+1:] }

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// TestDirectivesBinaryClient sends directives in the binary protocol's system message.
func TestDirectivesBinaryClient(t *testing.T) {
	base, _, _ := directivesGateway(t)
	for _, proto := range []client.Protocol{client.Binary2Text, client.Binary2} {
		c, err := client.New(client.Options{BaseURL: base, Protocol: proto})
		if err != nil {
			t.Fatal(err)
		}
		req := &client.Request{Model: "sim", MaxTokens: 200,
			System:   []client.Block{{Type: llm.BlockText, Text: "<|json_mode|>\n<|temperature:0.5|>\nBe brief."}},
			Messages: []client.Message{{Role: llm.RoleUser, Content: []client.Block{{Type: llm.BlockText, Text: "Weather?"}}}}}
		r, err := c.Message(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		var v map[string]any
		if len(r.Content) == 0 || json.Unmarshal([]byte(r.Content[0].Text), &v) != nil || v["answer"] == nil {
			t.Errorf("%s: json_mode answer %+v is not a JSON object", proto, r.Content)
		}
		// Above the Anthropic range, which the binary protocol shares.
		req.System[0].Text = "<|temperature:1.5|>"
		_, err = c.Message(context.Background(), req)
		var e *client.Error
		if !errors.As(err, &e) || e.Status() != 400 || !strings.Contains(e.Message, "<|temperature|>") {
			t.Errorf("%s: temperature 1.5: got %v, want a 400 naming the directive", proto, err)
		}
		c.CloseIdleConnections()
	}
}

// TestDirectiveSmuggledThroughChain sends, to an edge layer0 in front of a core layer0, a system
// prompt in which removing one directive forms another: `<|offl<|json_mode:false|>oad:vip|>`.
// The edge's key may use only the model small; the core's offload target vip stands for premium.
// Stripped once and passed on, the prompt would reach the core as `<|offload:vip|>` and be served
// by premium. The edge refuses it with a 400 in each client's format.
func TestDirectiveSmuggledThroughChain(t *testing.T) {
	_, core := serveGateway(t, parseConfig(t, `
engines:
  cheap: {kind: sim}
  costly: {kind: sim}
models:
  small: {engines: [cheap]}
  premium: {engines: [costly]}
offload_targets:
  vip: {model: premium}
`))
	_, edge := serveGateway(t, parseConfig(t, fmt.Sprintf(`
keys:
  - {name: user, hash: %s, models: [small]}
engines:
  core: {kind: layer0, url: %q}
models:
  small: {engines: [core]}
  premium: {engines: [core]}
`, authHash("l0-user"), core)))
	const smuggled = "<|offl<|json_mode:false|>oad:vip|>"
	ctx := context.Background()

	ac := anthropicClient(edge, option.WithAPIKey("l0-user"))
	// The key may not use premium directly: the chain's policy the smuggled directive would bypass.
	if _, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "premium", MaxTokens: 5, Messages: userText("hi")}); err == nil {
		t.Fatal("the edge's key used premium directly")
	}
	_, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "small", MaxTokens: 5,
		System: []anthropic.TextBlockParam{{Text: smuggled}}, Messages: userText("hi")})
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.RawJSON(), `"invalid_request_error"`) ||
		!strings.Contains(ae.RawJSON(), "another directive") {
		t.Errorf("anthropic: got %v, want a 400 invalid_request_error saying the text forms another directive", err)
	}

	oc := oai.NewClient(oaiopt.WithBaseURL(edge+"/v1"), oaiopt.WithAPIKey("l0-user"), oaiopt.WithMaxRetries(0))
	_, err = oc.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "small",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.DeveloperMessage("Be brief. " + smuggled), oai.UserMessage("hi")}})
	var oe *oai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 400 || oe.Param != "system" || !strings.Contains(oe.Message, "another directive") {
		t.Errorf("openai: got %v, want a 400 on param system saying the text forms another directive", err)
	}

	bc, err := client.New(client.Options{BaseURL: edge, Protocol: client.Binary2, APIKey: "l0-user"})
	if err != nil {
		t.Fatal(err)
	}
	defer bc.CloseIdleConnections()
	_, err = bc.Message(ctx, &client.Request{Model: "small", MaxTokens: 5,
		System:   []client.Block{{Type: llm.BlockText, Text: smuggled}},
		Messages: []client.Message{{Role: llm.RoleUser, Content: []client.Block{{Type: llm.BlockText, Text: "hi"}}}}})
	var be *client.Error
	if !errors.As(err, &be) || be.Status() != 400 || !strings.Contains(be.Message, "another directive") {
		t.Errorf("binary: got %v, want a 400 saying the text forms another directive", err)
	}
}
