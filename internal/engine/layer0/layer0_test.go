package layer0

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream"
	"github.com/layer0ai/layer0/internal/upstream/fake"
	"github.com/layer0ai/layer0/internal/wire/binary"
)

// env holds the engine's credential, K, and nothing else.
func env(k string) string {
	if k == "K" {
		return "peer-key-123456"
	}
	return ""
}

func newEngine(t *testing.T, url string, protocol string) *Engine {
	t.Helper()
	e, err := New("edge", config.Engine{Kind: config.KindLayer0, URL: url, APIKeyEnv: "K",
		Timeouts: config.Timeouts{Connect: time.Second, FirstByte: 5 * time.Second, Idle: 5 * time.Second, Total: 10 * time.Second}},
		Options{Protocol: protocol, Upstream: upstream.Options{Getenv: env}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Client().CloseIdle)
	return e
}

func request() *llm.Request {
	temp := 0.3
	return &llm.Request{Model: "big", MaxTokens: 50, Temperature: &temp, StopSequences: []string{"END"},
		System: []llm.Block{{Type: llm.BlockText, Text: "sys"}},
		Tools:  []llm.Tool{{Name: "get_weather", InputSchema: json.RawMessage(`{"type":"object"}`)}},
		Messages: []llm.Message{
			{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "weather?"}}},
			{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockToolUse, ID: "toolu_1", Name: "get_weather", Input: json.RawMessage(`{"city":"Paris"}`)}}},
			{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockToolResult, ToolUseID: "toolu_1", Content: []llm.Block{{Type: llm.BlockText, Text: "sunny"}}}}},
		}}
}

// binaryPeer is a layer0 peer that speaks the binary protocol: it decodes the request with the
// binary codec and answers fixed events with the binary stream writer.
func binaryPeer(t *testing.T, got chan<- *llm.Request, status int) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, mode, err := binary.DecodeRequest(body, r.Header)
		if err != nil {
			t.Errorf("peer cannot decode: %v", err)
			w.WriteHeader(400)
			return
		}
		got <- req
		if status != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}`)
			return
		}
		w.Header().Set("Content-Type", mode.ContentType())
		rc := http.NewResponseController(w)
		sw, err := binary.NewStreamWriter(w, rc.Flush, mode, nil)
		if err != nil {
			t.Error(err)
			return
		}
		for _, ev := range []llm.Event{
			{Kind: llm.EventStart, ID: "msg_peer", Model: req.Model, Usage: llm.Usage{InputTokens: 12, CacheReadInputTokens: 30}},
			{Kind: llm.EventBlockStart, Index: 0, Block: llm.BlockText},
			{Kind: llm.EventTextDelta, Index: 0, Text: "It is sunny in Paris."},
			{Kind: llm.EventBlockStop, Index: 0},
			{Kind: llm.EventStop, Stop: llm.StopEndTurn, Usage: llm.Usage{InputTokens: 12, CacheReadInputTokens: 30, OutputTokens: 6}},
		} {
			if err := sw.Send(&ev); err != nil {
				t.Error(err)
			}
		}
		if err := sw.Flush(); err != nil {
			t.Error(err)
		}
	}))
}

func TestBinary(t *testing.T) {
	got := make(chan *llm.Request, 4)
	peer := binaryPeer(t, got, 0)
	defer peer.Close()
	e := newEngine(t, peer.URL, "")
	var c llm.Collector
	if err := e.Generate(context.Background(), request(), &c); err != nil {
		t.Fatal(err)
	}
	want := llm.Response{ID: "msg_peer", Model: "big", Content: []llm.Block{{Type: llm.BlockText, Text: "It is sunny in Paris."}},
		Usage: llm.Usage{InputTokens: 12, CacheReadInputTokens: 30, OutputTokens: 6}}
	if diff := cmp.Diff(want, c.Response); diff != "" {
		t.Errorf("response mismatch (-want +got):\n%s", diff)
	}
	sent := <-got
	wantReq := request()
	wantReq.Format, wantReq.Stream = llm.FormatBinary, true
	if diff := cmp.Diff(wantReq, sent); diff != "" {
		t.Errorf("the peer got a different request (-want +got):\n%s", diff)
	}
	if !e.Binary() {
		t.Error("got Binary false after a binary success")
	}
}

func TestBinaryErrorNoFallbackOnceKnown(t *testing.T) {
	got := make(chan *llm.Request, 4)
	peer := binaryPeer(t, got, 400)
	defer peer.Close()
	e := newEngine(t, peer.URL, "")
	e.binary.Store(binaryWorks)
	err := e.Generate(context.Background(), request(), &llm.Collector{})
	var ae *apierr.Error
	if !errors.As(err, &ae) || ae.Kind != apierr.InvalidRequest || !strings.HasPrefix(ae.Message, "prompt is too long") ||
		!strings.Contains(ae.Message, "status 400") {
		t.Errorf("got %v, want the peer's 400", err)
	}
	if !e.Binary() {
		t.Error("a request's own 400 turned binary off")
	}
}

// TestFallbackToJSON runs against a peer that speaks only JSON: the first request is refused
// in binary and sent again as JSON, and every later one goes as JSON at once.
func TestFallbackToJSON(t *testing.T) {
	f := fake.NewAnthropic(fake.Script{Text: "json answer"})
	defer f.Close()
	e := newEngine(t, f.URL, "")
	for i := 0; i < 2; i++ {
		var c llm.Collector
		if err := e.Generate(context.Background(), request(), &c); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if c.Response.Stop != llm.StopToolUse && c.Response.Content[0].Text != "json answer" {
			t.Errorf("request %d: got %+v", i, c.Response)
		}
	}
	reqs := f.Requests()
	if len(reqs) != 3 {
		t.Fatalf("got %d requests at the peer, want 3 (binary, JSON, JSON)", len(reqs))
	}
	if !bytes.HasPrefix(reqs[0].Body, []byte(binary.Magic)) || reqs[1].Body[0] != '{' || reqs[2].Body[0] != '{' {
		t.Errorf("got bodies starting %q %q %q", reqs[0].Body[:4], reqs[1].Body[:1], reqs[2].Body[:1])
	}
	if reqs[1].Header.Get("Authorization") != "Bearer peer-key-123456" {
		t.Errorf("got Authorization %q", reqs[1].Header.Get("Authorization"))
	}
	if e.Binary() {
		t.Error("got Binary true after the peer refused it")
	}
}

func TestJSONProtocol(t *testing.T) {
	f := fake.NewAnthropic(fake.Script{})
	defer f.Close()
	e := newEngine(t, f.URL, ProtocolJSON)
	if err := e.Generate(context.Background(), request(), &llm.Collector{}); err != nil {
		t.Fatal(err)
	}
	if n := len(f.Requests()); n != 1 || f.Requests()[0].Body[0] != '{' {
		t.Errorf("got %d requests, want one JSON request", n)
	}
	if _, err := New("x", config.Engine{URL: f.URL}, Options{Protocol: "carrier-pigeon"}); err == nil {
		t.Error("got no error for an unknown protocol")
	}
}

// A request with a system message inside the conversation goes as JSON, which keeps it at its
// place, even to a peer that speaks binary; binary stays on for the next requests.
func TestSystemMessageGoesAsJSON(t *testing.T) {
	f := fake.NewAnthropic(fake.Script{Text: "json answer"})
	defer f.Close()
	e := newEngine(t, f.URL, "")
	e.binary.Store(binaryWorks)
	req := request()
	req.Messages = append(req.Messages, llm.Message{Role: llm.RoleSystem, Content: []llm.Block{{Type: llm.BlockText, Text: "env"}}})
	if err := e.Generate(context.Background(), req, &llm.Collector{}); err != nil {
		t.Fatal(err)
	}
	reqs := f.Requests()
	if len(reqs) != 1 || !bytes.Contains(reqs[0].Body, []byte(`{"role":"system","content":"env"}`)) {
		t.Fatalf("got %d requests, want one JSON request with the system message last", len(reqs))
	}
	if !e.Binary() {
		t.Error("a system message turned binary off")
	}
}
