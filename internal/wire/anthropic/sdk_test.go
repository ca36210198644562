package anthropic

// These tests put the official Go SDK on both sides of the codec, as the product requires
// ("the official SDKs must work unmodified"): the SDK's requests must decode, and what the codec
// writes must parse in the SDK, over a real HTTP listener on 127.0.0.1.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/google/go-cmp/cmp"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

// fakeAPI serves the Messages and Models APIs from this package's encoders.
type fakeAPI struct {
	models []Model

	mu   sync.Mutex
	reqs []*llm.Request // decoded request bodies, in order
}

func (f *fakeAPI) fail(w http.ResponseWriter, e *apierr.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("request-id", "req_test")
	w.WriteHeader(e.Status())
	_, _ = w.Write(AppendError(nil, e, "req_test"))
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		f.fail(w, apierr.From(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/v1/messages/count_tokens":
		if _, err := DecodeCountTokens(body); err != nil {
			f.fail(w, apierr.From(err))
			return
		}
		_, _ = w.Write(AppendCountTokens(nil, 42))
	case r.URL.Path == "/v1/messages":
		req, err := DecodeRequest(body)
		if err != nil {
			f.fail(w, apierr.From(err))
			return
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, req)
		f.mu.Unlock()
		if req.Model == "overloaded" {
			f.fail(w, apierr.New(apierr.Overloaded, "Overloaded"))
			return
		}
		if !req.Stream {
			_, _ = w.Write(AppendResponse(nil, &sampleResponse, "msg_sdk"))
			return
		}
		steps := toolStream
		if req.Model == "fail-mid" {
			steps = errorStream
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		sw := NewStreamWriter("msg_sdk", w, rc.Flush)
		for _, s := range steps {
			switch {
			case s.ev != nil:
				err = sw.Send(s.ev)
			case s.flush:
				err = sw.Flush()
			default:
				err = sw.WriteError(s.err)
			}
			if err != nil {
				return
			}
		}
	case r.URL.Path == "/v1/models":
		out, err := AppendModelList(nil, f.models, r.URL.Query())
		if err != nil {
			f.fail(w, apierr.From(err))
			return
		}
		_, _ = w.Write(out)
	case strings.HasPrefix(r.URL.Path, "/v1/models/"):
		id := strings.TrimPrefix(r.URL.Path, "/v1/models/")
		for _, m := range f.models {
			if m.ID == id {
				_, _ = w.Write(AppendModel(nil, m))
				return
			}
		}
		f.fail(w, apierr.New(apierr.NotFound, "model: %s", id))
	default:
		f.fail(w, apierr.New(apierr.NotFound, "not found"))
	}
}

func newSDK(t *testing.T) (sdk.Client, *fakeAPI) {
	t.Helper()
	api := &fakeAPI{}
	for i := range 45 {
		api.models = append(api.models, Model{ID: fmt.Sprintf("model-%02d", i), DisplayName: fmt.Sprintf("Model %d", i),
			Created: time.Date(2025, 1, 1+i, 0, 0, 0, 0, time.UTC)})
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	client := sdk.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("test-key"), option.WithMaxRetries(0),
		option.WithRequestTimeout(10*time.Second))
	return client, api
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%v in %s", err, a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%v in %s", err, b)
	}
	return cmp.Equal(x, y)
}

func TestSDKMessagesNew(t *testing.T) {
	client, api := newSDK(t)
	params := sdk.MessageNewParams{
		Model:     "claude-test",
		MaxTokens: 512,
		System:    []sdk.TextBlockParam{{Text: "Be brief."}},
		Messages: []sdk.MessageParam{
			sdk.NewUserMessage(sdk.NewTextBlock("What is the weather in Paris?"), sdk.NewImageBlockBase64("image/png", "iVBORw0KGgo=")),
			sdk.NewAssistantMessage(sdk.NewToolUseBlock("toolu_1", map[string]any{"city": "Paris"}, "get_weather")),
			sdk.NewUserMessage(sdk.NewToolResultBlock("toolu_1", "18C and cloudy", false)),
		},
		Temperature:   sdk.Float(0.2),
		TopP:          sdk.Float(0.9),
		TopK:          sdk.Int(20),
		StopSequences: []string{"END"},
		Metadata:      sdk.MetadataParam{UserID: sdk.String("user-1")},
		Tools: []sdk.ToolUnionParam{{OfTool: &sdk.ToolParam{
			Name:        "get_weather",
			Description: sdk.String("Get the weather"),
			InputSchema: sdk.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}},
		}}},
		ToolChoice: sdk.ToolChoiceParamOfTool("get_weather"),
	}
	msg, err := client.Messages.New(context.Background(), params)
	if err != nil {
		t.Fatalf("Messages.New: %v", err)
	}

	// What the SDK sent, as the gateway decoded it.
	got := api.reqs[0]
	want := &llm.Request{
		Model: "claude-test", MaxTokens: 512,
		System: []llm.Block{text("Be brief.")},
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: []llm.Block{text("What is the weather in Paris?"), {Type: llm.BlockImage, MediaType: "image/png", Data: "iVBORw0KGgo="}}},
			{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockToolUse, ID: "toolu_1", Name: "get_weather", Input: json.RawMessage(`{"city":"Paris"}`)}}},
			{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockToolResult, ToolUseID: "toolu_1", Content: []llm.Block{text("18C and cloudy")}}}},
		},
		Temperature: f64(0.2), TopP: f64(0.9), TopK: intp(20),
		StopSequences: []string{"END"},
		Tools:         []llm.Tool{{Name: "get_weather", Description: "Get the weather"}},
		ToolChoice:    llm.ToolChoice{Type: llm.ToolNamed, Name: "get_weather"},
		UserID:        "user-1",
	}
	if len(got.Tools) == 1 {
		if wantSchema := `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`; !jsonEqual(t, got.Tools[0].InputSchema, []byte(wantSchema)) {
			t.Errorf("input_schema: got %s, want %s", got.Tools[0].InputSchema, wantSchema)
		}
		want.Tools[0].InputSchema = got.Tools[0].InputSchema
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoded SDK request mismatch (-want +got):\n%s", diff)
	}

	// What the SDK read from AppendResponse.
	if msg.ID != "msg_sdk" || msg.Model != "claude-test" || msg.Role != "assistant" || msg.StopReason != sdk.StopReasonToolUse {
		t.Errorf("got id %q model %q role %q stop %q, want msg_sdk claude-test assistant tool_use", msg.ID, msg.Model, msg.Role, msg.StopReason)
	}
	if len(msg.Content) != 2 || msg.Content[0].Text != sampleResponse.Content[0].Text ||
		msg.Content[1].Type != "tool_use" || msg.Content[1].ID != "toolu_01" || !jsonEqual(t, msg.Content[1].Input, sampleResponse.Content[1].Input) {
		t.Errorf("got content %+v, want the sample response's", msg.Content)
	}
	u := msg.Usage
	if u.InputTokens != 10 || u.OutputTokens != 20 || u.CacheCreationInputTokens != 3 || u.CacheReadInputTokens != 4 {
		t.Errorf("got usage %+v, want 10 in, 20 out, 3 created, 4 read", u)
	}
}

func TestSDKStreaming(t *testing.T) {
	client, _ := newSDK(t)
	stream := client.Messages.NewStreaming(context.Background(), sdk.MessageNewParams{
		Model: "claude-test", MaxTokens: 64,
		Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("Weather?"))},
	})
	var msg sdk.Message
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if err := msg.Accumulate(ev); err != nil {
			t.Fatalf("Accumulate(%s): %v", ev.Type, err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	wantTypes := []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if diff := cmp.Diff(wantTypes, types); diff != "" {
		t.Errorf("event types mismatch (-want +got):\n%s", diff)
	}
	if msg.ID != "msg_sdk" || msg.StopReason != sdk.StopReasonToolUse || len(msg.Content) != 2 {
		t.Fatalf("got message %+v, want msg_sdk with 2 blocks stopped for tool_use", msg)
	}
	if msg.Content[0].Text != "Let me check." || msg.Content[1].Name != "get_weather" ||
		!jsonEqual(t, msg.Content[1].Input, []byte(`{"city":"Paris"}`)) {
		t.Errorf("got content %+v", msg.Content)
	}
	if u := msg.Usage; u.InputTokens != 30 || u.OutputTokens != 21 || u.CacheCreationInputTokens != 7 {
		t.Errorf("got usage %+v, want 30 in, 21 out, 7 created", u)
	}
}

func TestSDKErrors(t *testing.T) {
	client, _ := newSDK(t)
	ctx := context.Background()
	msgs := []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("hi"))}

	_, err := client.Messages.New(ctx, sdk.MessageNewParams{Model: "overloaded", MaxTokens: 8, Messages: msgs})
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("got %v, want an *anthropic.Error", err)
	}
	if apiErr.StatusCode != 529 || apiErr.Type() != "overloaded_error" || apiErr.RequestID != "req_test" {
		t.Errorf("got status %d type %q request id %q, want 529 overloaded_error req_test", apiErr.StatusCode, apiErr.Type(), apiErr.RequestID)
	}

	_, err = client.Messages.New(ctx, sdk.MessageNewParams{Model: "m", MaxTokens: 0, Messages: msgs})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Type() != "invalid_request_error" ||
		!strings.Contains(apiErr.Error(), "max_tokens: must be at least 1, got 0") {
		t.Errorf("got %v, want a 400 invalid_request_error about max_tokens", err)
	}

	stream := client.Messages.NewStreaming(ctx, sdk.MessageNewParams{Model: "fail-mid", MaxTokens: 8, Messages: msgs})
	var text strings.Builder
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "content_block_delta" {
			text.WriteString(ev.Delta.Text)
		}
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "overloaded_error") {
		t.Errorf("stream error: got %v, want one naming overloaded_error", err)
	}
	if got := text.String(); got != "Partial answer" {
		t.Errorf("text before the error: got %q, want %q", got, "Partial answer")
	}
}

func TestSDKModels(t *testing.T) {
	client, api := newSDK(t)
	ctx := context.Background()

	var ids []string
	iter := client.Models.ListAutoPaging(ctx, sdk.ModelListParams{Limit: sdk.Int(10)})
	for iter.Next() {
		ids = append(ids, iter.Current().ID)
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("ListAutoPaging: %v", err)
	}
	var want []string
	for _, m := range api.models {
		want = append(want, m.ID)
	}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("paged ids mismatch (-want +got):\n%s", diff)
	}

	page, err := client.Models.List(ctx, sdk.ModelListParams{BeforeID: sdk.String("model-30"), Limit: sdk.Int(10)})
	if err != nil {
		t.Fatal(err)
	}
	if page.FirstID != "model-20" || page.LastID != "model-29" || !page.HasMore {
		t.Errorf("before_id page: got first %q last %q more %t, want model-20 model-29 true", page.FirstID, page.LastID, page.HasMore)
	}
	page, err = page.GetNextPage()
	if err != nil || page == nil || page.FirstID != "model-10" {
		t.Errorf("page before that: got %+v, %v, want it to start at model-10", page, err)
	}

	m, err := client.Models.Get(ctx, "model-03", sdk.ModelGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "model-03" || m.DisplayName != "Model 3" || !m.CreatedAt.Equal(api.models[3].Created) {
		t.Errorf("got %+v, want model-03", m)
	}

	_, err = client.Models.List(ctx, sdk.ModelListParams{Limit: sdk.Int(5000)})
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Error(), "limit: must be an integer between 1 and 1000") {
		t.Errorf("limit 5000: got %v, want a 400 naming limit", err)
	}
}

func TestSDKCountTokens(t *testing.T) {
	client, _ := newSDK(t)
	n, err := client.Messages.CountTokens(context.Background(), sdk.MessageCountTokensParams{
		Model:    "claude-test",
		Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("hi"))},
		System:   sdk.MessageCountTokensParamsSystemUnion{OfString: sdk.String("sys")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n.InputTokens != 42 {
		t.Errorf("got %d input tokens, want 42", n.InputTokens)
	}
}
