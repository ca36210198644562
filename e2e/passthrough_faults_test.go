package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

// badEngine is a loopback HTTP/1.1 engine that answers every request with one scripted
// misbehaviour, over a raw socket, so that it can send what no HTTP library would: a body cut
// by a reset, garbage, an event without end.
type badEngine struct {
	URL      string
	ln       net.Listener
	mu       sync.Mutex
	act      badAct
	conns    []net.Conn
	wg       sync.WaitGroup
	requests atomic.Int32
}

// badAct answers one request (stream says whether it asked for a stream) on conn; it reports
// whether the connection may serve another request.
type badAct func(conn *net.TCPConn, stream bool) bool

func newBadEngine(t *testing.T) *badEngine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &badEngine{URL: "http://" + ln.Addr().String(), ln: ln}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				b.serve(c.(*net.TCPConn))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
	return b
}

func (b *badEngine) set(act badAct) {
	b.mu.Lock()
	b.act = act
	b.mu.Unlock()
}

func (b *badEngine) serve(c *net.TCPConn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for range 100 { // requests per connection
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		if err != nil {
			return
		}
		var r struct{ Stream bool }
		_ = json.Unmarshal(body, &r)
		b.requests.Add(1)
		b.mu.Lock()
		act := b.act
		b.mu.Unlock()
		if !act(c, r.Stream) {
			return
		}
	}
}

// respond writes a whole answer with a Content-Length.
func respond(c net.Conn, status int, contentType, body string) bool {
	_, err := fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
		status, http.StatusText(status), contentType, len(body), body)
	return err == nil
}

// head writes a 200's head: for SSE a body that ends with the connection, else one of length n.
func head(c net.Conn, contentType string, n int) error {
	length := "Connection: close\r\n"
	if n >= 0 {
		length = "Content-Length: " + strconv.Itoa(n) + "\r\n"
	}
	_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\n%s\r\n", contentType, length)
	return err
}

// waitClosed blocks until the peer closes c (layer0 giving up), for at most 20 s.
func waitClosed(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, _ = io.Copy(io.Discard, c)
}

// reset closes c with a TCP reset.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

// faultFormat is one format's side of the fault tests: its path, good answers to cut, and what
// its engine kind sends.
type faultFormat struct {
	name     string
	path     string
	json     string // a complete non-streamed answer
	prelude  string // stream events before content
	content  string // one stream event with content
	endless  string // the start of an event that never ends
	errorEnd func(body string) bool
	errorEv  string // what starts the format's error event
}

var faultFormats = []faultFormat{
	{
		name: "anthropic",
		path: "/v1/messages",
		json: `{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":"Hello from the broken engine"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":6}}`,
		prelude: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n" +
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
		content: "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello from the broken engine\"}}\n\n",
		endless: "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"",
		errorEnd: func(body string) bool {
			return strings.HasSuffix(body, "\n\n") && strings.Contains(body[strings.LastIndex(body, "event: "):], "event: error\ndata: {\"type\":\"error\"")
		},
		errorEv: "event: error\n",
	},
	{
		name:    "openai",
		path:    "/v1/chat/completions",
		json:    `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the broken engine"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11}}`,
		prelude: "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
		content: "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello from the broken engine\"},\"finish_reason\":null}]}\n\n",
		endless: "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"",
		errorEnd: func(body string) bool {
			i := strings.LastIndex(strings.TrimSuffix(body, "\n\n"), "\n\n")
			return strings.HasSuffix(body, "\n\n") && strings.HasPrefix(body[i+2:], `data: {"error":{`)
		},
		errorEv: `data: {"error":`,
	},
}

// fault is one misbehaviour; stream and json say which requests it applies to.
type fault struct {
	name         string
	stream, json bool
	act          func(f faultFormat) badAct
}

// garbage is the same 4 KiB of pseudo-random bytes for every run.
var garbage = func() string {
	r := rand.New(rand.NewPCG(9, 5))
	b := make([]byte, 4096)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return string(b)
}()

const secretPath = "/home/build/secret/app.py"

var faults = []fault{
	{"truncated JSON", false, true, func(f faultFormat) badAct {
		return func(c *net.TCPConn, _ bool) bool {
			return respond(c, 200, "application/json", f.json[:len(f.json)/2])
		}
	}},
	{"wrong content type", true, true, func(f faultFormat) badAct {
		return func(c *net.TCPConn, _ bool) bool {
			return respond(c, 200, "text/html; charset=utf-8", "<html><body><pre>Traceback in "+secretPath+"</pre></body></html>")
		}
	}},
	{"JSON for a stream", true, false, func(f faultFormat) badAct {
		return func(c *net.TCPConn, _ bool) bool { return respond(c, 200, "application/json", f.json) }
	}},
	{"stall after headers", true, true, func(f faultFormat) badAct {
		return func(c *net.TCPConn, stream bool) bool {
			if stream {
				_ = head(c, "text/event-stream", -1)
			} else {
				_ = head(c, "application/json", len(f.json))
			}
			waitClosed(c)
			return false
		}
	}},
	{"stall after the prelude", true, false, func(f faultFormat) badAct {
		return func(c *net.TCPConn, _ bool) bool {
			if head(c, "text/event-stream", -1) == nil {
				_, _ = io.WriteString(c, f.prelude)
			}
			waitClosed(c)
			return false
		}
	}},
	{"reset mid-body", true, true, func(f faultFormat) badAct {
		return func(c *net.TCPConn, stream bool) bool {
			if stream {
				if head(c, "text/event-stream", -1) == nil {
					_, _ = io.WriteString(c, f.prelude+f.content[:len(f.content)/2])
				}
			} else if head(c, "application/json", len(f.json)) == nil {
				_, _ = io.WriteString(c, f.json[:len(f.json)/2])
			}
			time.Sleep(20 * time.Millisecond) // let the bytes go before the reset
			reset(c)
			return false
		}
	}},
	{"garbage", true, true, func(f faultFormat) badAct {
		return func(c *net.TCPConn, stream bool) bool {
			if stream {
				if head(c, "text/event-stream", -1) == nil {
					_, _ = io.WriteString(c, garbage)
				}
				return false
			}
			return respond(c, 200, "application/json", garbage)
		}
	}},
	{"garbage after the prelude", true, false, func(f faultFormat) badAct {
		return func(c *net.TCPConn, _ bool) bool {
			if head(c, "text/event-stream", -1) == nil {
				_, _ = io.WriteString(c, f.prelude+"data: {\"x\":1}\n\n"+garbage)
			}
			return false
		}
	}},
	{"endless event", true, false, func(f faultFormat) badAct {
		return func(c *net.TCPConn, _ bool) bool {
			if head(c, "text/event-stream", -1) != nil {
				return false
			}
			_, _ = io.WriteString(c, f.prelude+f.endless)
			chunk := bytes.Repeat([]byte("x"), 64<<10)
			deadline := time.Now().Add(20 * time.Second)
			for range 1024 { // 64 MiB at most, far beyond layer0's bound
				_ = c.SetWriteDeadline(deadline)
				if _, err := c.Write(chunk); err != nil {
					return false
				}
			}
			return false
		}
	}},
}

// faultGateway serves, for each format, a model on the bad engine with a healthy fallback and
// one without.
func faultGateway(t *testing.T) (ant, oaiEngine *badEngine, base string) {
	ant, oaiEngine = newBadEngine(t), newBadEngine(t)
	_, base = serveGateway(t, parseConfig(t, `
engines:
  bad-anthropic: {kind: anthropic, url: "`+ant.URL+`", timeouts: {first_byte: 400ms, idle: 400ms, total: 15s}}
  bad-openai: {kind: openai, url: "`+oaiEngine.URL+`", timeouts: {first_byte: 400ms, idle: 400ms, total: 15s}}
  ok: {kind: sim}
models:
  anthropic: {engines: [bad-anthropic], fallback: [backup]}
  anthropic-alone: {engines: [bad-anthropic]}
  openai: {engines: [bad-openai], fallback: [backup]}
  openai-alone: {engines: [bad-openai]}
  backup: {engines: [ok]}
routing:
  ejection: {consecutive_failures: -1}
  breaker: {failure_ratio: 2}
`))
	return ant, oaiEngine, base
}

// postRaw sends a request of the format's shape and returns the status, content type and body.
func postRaw(t *testing.T, base, path, model string, stream bool) (int, string, string) {
	t.Helper()
	body := `{"model":"` + model + `","max_tokens":16,"stream":` + strconv.FormatBool(stream) +
		`,"messages":[{"role":"user","content":"hello"}]}`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// TestPassThroughBrokenEngine puts a misbehaving engine of the client's own format behind
// layer0 (the pass-through path): a 200 with truncated JSON, a wrong content type, JSON for a
// stream, a stall after the headers or the prelude, a reset mid-body, garbage, an event that
// never ends. Without a fallback the client gets an error in its format, never a 200 with the
// broken body (nor any of the engine's bytes); with a healthy fallback the official SDK gets the
// fallback's good answer.
func TestPassThroughBrokenEngine(t *testing.T) {
	ant, oe, base := faultGateway(t)
	engines := map[string]*badEngine{"anthropic": ant, "openai": oe}
	for _, f := range faultFormats {
		for _, flt := range faults {
			for _, stream := range []bool{false, true} {
				if stream && !flt.stream || !stream && !flt.json {
					continue
				}
				name := fmt.Sprintf("%s/%s/stream=%v", f.name, flt.name, stream)
				t.Run(name, func(t *testing.T) {
					eng := engines[f.name]
					eng.set(flt.act(f))
					before := eng.requests.Load()

					start := time.Now()
					status, ct, body := postRaw(t, base, f.path, f.name+"-alone", stream)
					if eng.requests.Load() == before {
						t.Fatal("the bad engine got no request: the test tests nothing")
					}
					if status == http.StatusOK {
						t.Fatalf("got 200 (%s) for a broken answer:\n%.500q", ct, body)
					}
					if status < 500 || !strings.HasPrefix(ct, "application/json") {
						t.Errorf("got %d %s, want a 5xx JSON error", status, ct)
					}
					var e struct {
						Error struct{ Message string }
					}
					if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" {
						t.Errorf("the error is not the format's error object (%v):\n%.500q", err, body)
					}
					if strings.Contains(body, "broken engine") || strings.Contains(body, secretPath) || strings.Contains(body, "xxxx") {
						t.Errorf("the engine's bytes reached the client:\n%.500q", body)
					}
					if d := time.Since(start); d > 10*time.Second {
						t.Errorf("the client waited %s for its error", d)
					}

					text, engine := sdkCall(t, base, f.name, stream)
					if engine != "ok" || !strings.Contains(text, " ") {
						t.Errorf("with a fallback: got %q from %q, want the fallback ok's answer", text, engine)
					}
				})
			}
		}
	}
}

// sdkCall asks the model named format (which falls back to a healthy sim) through the format's
// official SDK and returns the answer's text and the engine that served it.
func sdkCall(t *testing.T, base, format string, stream bool) (text, engine string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var hr *http.Response
	switch format {
	case "anthropic":
		c := anthropicClient(base, option.WithResponseInto(&hr))
		p := anthropic.MessageNewParams{Model: "anthropic", MaxTokens: 16, Messages: userText("hello")}
		if !stream {
			msg, err := c.Messages.New(ctx, p)
			if err != nil {
				t.Fatalf("anthropic SDK: %v", err)
			}
			if msg.Model != "anthropic" {
				t.Errorf("got model %q, want the one asked for", msg.Model)
			}
			for _, b := range msg.Content {
				text += b.Text
			}
			break
		}
		s := c.Messages.NewStreaming(ctx, p)
		var msg anthropic.Message
		for s.Next() {
			if err := msg.Accumulate(s.Current()); err != nil {
				t.Fatalf("anthropic SDK stream: %v", err)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatalf("anthropic SDK stream: %v", err)
		}
		for _, b := range msg.Content {
			text += b.Text
		}
	default:
		c := oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey("test-key"), oaiopt.WithMaxRetries(0),
			oaiopt.WithResponseInto(&hr))
		p := oai.ChatCompletionNewParams{Model: "openai", MaxTokens: oai.Int(16),
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hello")}}
		if !stream {
			cc, err := c.Chat.Completions.New(ctx, p)
			if err != nil {
				t.Fatalf("openai SDK: %v", err)
			}
			if len(cc.Choices) == 0 || cc.Model != "openai" {
				t.Fatalf("got %d choices from model %q", len(cc.Choices), cc.Model)
			}
			text = cc.Choices[0].Message.Content
			break
		}
		s := c.Chat.Completions.NewStreaming(ctx, p)
		var acc oai.ChatCompletionAccumulator
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			t.Fatalf("openai SDK stream: %v", err)
		}
		if len(acc.Choices) == 0 {
			t.Fatal("openai SDK stream: no choices")
		}
		text = acc.Choices[0].Message.Content
	}
	if hr == nil {
		t.Fatal("the SDK kept no response")
	}
	return text, hr.Header.Get("X-Layer0-Engine")
}

// TestPassThroughBrokenAfterContent breaks the engine's stream after content reached the client
// — a reset, an event cut short, garbage: the attempt cannot fall back, and the client's stream
// ends with its format's error event (Anthropic's event: error, OpenAI's error chunk) after the
// content, once.
func TestPassThroughBrokenAfterContent(t *testing.T) {
	ant, oe, base := faultGateway(t)
	engines := map[string]*badEngine{"anthropic": ant, "openai": oe}
	for _, f := range faultFormats {
		for _, tail := range []struct{ name, bytes string }{
			{"reset", f.content[:10]},
			{"cut event", f.content[:len(f.content)/2] + "\n\n"},
			{"garbage", garbage},
		} {
			t.Run(f.name+"/"+tail.name, func(t *testing.T) {
				engines[f.name].set(func(c *net.TCPConn, _ bool) bool {
					if head(c, "text/event-stream", -1) == nil {
						_, _ = io.WriteString(c, f.prelude+f.content+tail.bytes)
					}
					time.Sleep(20 * time.Millisecond)
					reset(c)
					return false
				})
				status, _, body := postRaw(t, base, f.path, f.name, true)
				if status != http.StatusOK || !strings.Contains(body, "Hello from the broken engine") {
					t.Fatalf("got %d, want the content streamed:\n%s", status, body)
				}
				if !f.errorEnd(body) || strings.Count(body, f.errorEv) != 1 || strings.Count(body, "Hello from the broken engine") != 1 {
					t.Errorf("the stream does not end with one error event after the content:\n%.2000q", body)
				}
			})
		}
	}
}

// TestPassThroughEngineErrorBody has the engine answer 500 with an HTML trace naming an
// internal path, or an API error whose message names internal addresses and credentials: the
// client's error is layer0's stable message naming the engine and its status, and none of the
// engine's words; the whole body goes to the process log, the engine's message to the access
// log's record of the request. The upstream key, echoed JSON-escaped, is in neither.
func TestPassThroughEngineErrorBody(t *testing.T) {
	var logBuf syncbuf.Buffer
	ant, oe := newBadEngine(t), newBadEngine(t)
	const upKey = "sk/up/0123456789abcdef"
	t.Setenv("LAYER0_TEST_UPSTREAM_KEY", upKey)
	_, base := serveGateway(t, parseConfig(t, `
engines:
  bad-anthropic: {kind: anthropic, url: "`+ant.URL+`", api_key_env: LAYER0_TEST_UPSTREAM_KEY}
  bad-openai: {kind: openai, url: "`+oe.URL+`", api_key_env: LAYER0_TEST_UPSTREAM_KEY}
models:
  anthropic: {engines: [bad-anthropic]}
  openai: {engines: [bad-openai]}
routing:
  ejection: {consecutive_failures: -1}
  breaker: {failure_ratio: 2}
`), layer0.WithLogger(slog.New(slog.NewJSONHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	html := "<html><head><title>500 Internal Server Error</title></head><body><pre>Traceback (most recent call last):\n  File \"" +
		secretPath + "\", line 42, in handler\nKeyError: 'x'</pre></body></html>"
	long := strings.Repeat("overloaded ", 200)
	tests := []struct {
		name, body, want string
	}{
		{"html", html, ""},
		{"plain text", "Internal error at " + secretPath, ""},
		{"api error", "", "the model is warming up, retry"},
		{"long api error", "", "overloaded overloaded"},
	}
	for _, f := range faultFormats {
		for _, tt := range tests {
			t.Run(f.name+"/"+tt.name, func(t *testing.T) {
				body, ct := tt.body, "text/html"
				if body == "" {
					msg := "the model is warming up,\n\tretry\x00 " + secretPath +
						" see http://10.9.8.7:8000/internal/admin?token=tok123 postgres://admin:pw@10.1.1.1/prod"
					if tt.name == "long api error" {
						msg = long
					}
					ct = "application/json"
					q, _ := json.Marshal(msg)
					// The key echoed as JSON may spell it: sk\/up\/… and \u0073k/…
					q = append(q[:len(q)-1], ` key sk\/up\/0123456789abcdef or \u0073k/up/0123456789abcdef"`...)
					if f.name == "anthropic" {
						body = `{"type":"error","error":{"type":"api_error","message":` + string(q) + `}}`
					} else {
						body = `{"error":{"message":` + string(q) + `,"type":"server_error","code":null}}`
					}
				}
				engines := map[string]*badEngine{"anthropic": ant, "openai": oe}
				engines[f.name].set(func(c *net.TCPConn, _ bool) bool { return respond(c, 500, ct, body) })
				for _, stream := range []bool{false, true} {
					status, _, got := postRaw(t, base, f.path, f.name, stream)
					var e struct {
						Error struct{ Message string }
					}
					if err := json.Unmarshal([]byte(got), &e); err != nil || status < 500 {
						t.Fatalf("stream=%v: got %d, want a 5xx error object:\n%s", stream, status, got)
					}
					m := e.Error.Message
					if !strings.Contains(m, "status 500") || !strings.Contains(m, "engine bad-"+f.name) {
						t.Errorf("stream=%v: the message %q does not name the engine and its status", stream, m)
					}
					for _, leak := range []string{"secret", "Traceback", "html", "10.9.8.7", "token", "postgres", "0123456789", "warming", "overloaded"} {
						if strings.Contains(got, leak) {
							t.Errorf("stream=%v: the engine's words (%q) reached the client: %q", stream, leak, got)
						}
					}
				}
			})
		}
	}
	log := logBuf.String()
	if !strings.Contains(log, secretPath) || !strings.Contains(log, "Traceback") || !strings.Contains(log, "10.9.8.7") {
		t.Errorf("the engine's error body did not reach the process log:\n%.2000s", log)
	}
	for _, spelling := range []string{upKey, `sk\\/up\\/0123456789abcdef`, `u0073k/up/0123456789abcdef`, "0123456789abcdef"} {
		if strings.Contains(log, spelling) {
			t.Errorf("the upstream key (%s) is in the log:\n%.3000s", spelling, log)
		}
	}
}

// oaiChunk is an OpenAI stream chunk of the bad engine with the given choices.
func oaiChunk(choices string) string {
	return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt","choices":` + choices + "}\n\n"
}

// TestOpenAIBrokenTwoHundreds has an OpenAI engine answer 200s that are not answers: before the
// first byte (a non-streamed {} or object without choices or finish_reason, a first chunk of
// invalid UTF-8) the attempt fails — the official SDK gets the fallback's answer, and without
// a fallback the client gets a 502 in its format; after content (a chunk that is not JSON,
// has no choices, holds invalid UTF-8, or [DONE] without a finish_reason) the stream ends
// with the format's error event, never as a success.
func TestOpenAIBrokenTwoHundreds(t *testing.T) {
	_, oe, base := faultGateway(t)
	f := faultFormats[1]
	sse := func(body string) badAct {
		return func(c *net.TCPConn, _ bool) bool {
			if head(c, "text/event-stream", -1) == nil {
				_, _ = io.WriteString(c, body)
			}
			return false
		}
	}
	before := []struct {
		name   string
		stream bool
		act    badAct
	}{
		{"empty object", false, func(c *net.TCPConn, _ bool) bool { return respond(c, 200, "application/json", `{}`) }},
		{"no choices", false, func(c *net.TCPConn, _ bool) bool {
			return respond(c, 200, "application/json", `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt","usage":{"prompt_tokens":5}}`)
		}},
		{"empty choices", false, func(c *net.TCPConn, _ bool) bool {
			return respond(c, 200, "application/json", `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt","choices":[]}`)
		}},
		{"no finish_reason", false, func(c *net.TCPConn, _ bool) bool {
			return respond(c, 200, "application/json", strings.Replace(f.json, `"finish_reason":"stop"`, `"finish_reason":null`, 1))
		}},
		{"invalid UTF-8 first", true, sse(f.prelude + oaiChunk(`[{"index":0,"delta":{"content":"Hello from the broken engine `+"\xff\xfe"+`"},"finish_reason":null}]`))},
	}
	for _, tt := range before {
		t.Run("before/"+tt.name, func(t *testing.T) {
			oe.set(tt.act)
			status, ct, body := postRaw(t, base, f.path, "openai-alone", tt.stream)
			var e struct {
				Error struct{ Message, Type string }
			}
			if status != http.StatusBadGateway || !strings.HasPrefix(ct, "application/json") ||
				json.Unmarshal([]byte(body), &e) != nil || e.Error.Message == "" {
				t.Errorf("got %d %s, want a 502 OpenAI error:\n%.500q", status, ct, body)
			}
			if strings.Contains(body, "broken engine") {
				t.Errorf("the engine's bytes reached the client:\n%.500q", body)
			}
			text, engine := sdkCall(t, base, "openai", tt.stream)
			if engine != "ok" || !strings.Contains(text, " ") {
				t.Errorf("with a fallback: got %q from %q, want the fallback ok's answer", text, engine)
			}
		})
	}
	after := []struct{ name, tail string }{
		{"not JSON", "data: {not json}\n\n" + oaiChunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`) + "data: [DONE]\n\n"},
		{"no choices", `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt"}` + "\n\n" +
			oaiChunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`) + "data: [DONE]\n\n"},
		{"invalid UTF-8", oaiChunk(`[{"index":0,"delta":{"content":"`+"\xc3\x28"+`"},"finish_reason":null}]`) +
			oaiChunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`) + "data: [DONE]\n\n"},
		{"DONE without finish_reason", "data: [DONE]\n\n"},
	}
	for _, tt := range after {
		t.Run("after/"+tt.name, func(t *testing.T) {
			oe.set(sse(f.prelude + f.content + tt.tail))
			status, _, body := postRaw(t, base, f.path, "openai", true)
			if status != http.StatusOK || !strings.Contains(body, "Hello from the broken engine") {
				t.Fatalf("got %d, want the content streamed:\n%s", status, body)
			}
			if !f.errorEnd(body) || strings.Count(body, f.errorEv) != 1 || strings.Contains(body, "[DONE]") {
				t.Errorf("the stream does not end with one error chunk after the content:\n%.2000q", body)
			}
		})
	}
}

// TestOpenAIEngineBrokenForAnthropicClients translates an OpenAI engine's broken answers for
// Anthropic clients: tool call arguments that are not JSON, a [DONE] without a finish_reason.
// They fail the attempt (the official SDK gets the fallback's answer; alone, a 502 in
// Anthropic's format), never "input":{} or an end_turn.
func TestOpenAIEngineBrokenForAnthropicClients(t *testing.T) {
	_, oe, base := faultGateway(t)
	f := faultFormats[1]
	for _, tt := range []struct{ name, body string }{
		{"tool arguments not JSON", f.prelude +
			oaiChunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"q\": broken"}}]},"finish_reason":null}]`) +
			oaiChunk(`[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`) + "data: [DONE]\n\n"},
		{"DONE without finish_reason", f.prelude + f.content + "data: [DONE]\n\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			oe.set(func(c *net.TCPConn, _ bool) bool {
				if head(c, "text/event-stream", -1) == nil {
					_, _ = io.WriteString(c, tt.body)
				}
				return false
			})
			status, _, body := postRaw(t, base, "/v1/messages", "openai-alone", false)
			var e struct {
				Type  string
				Error struct{ Type, Message string }
			}
			if status != http.StatusBadGateway || json.Unmarshal([]byte(body), &e) != nil || e.Type != "error" || e.Error.Message == "" {
				t.Errorf("got %d, want a 502 Anthropic error:\n%.500q", status, body)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var hr *http.Response
			c := anthropicClient(base, option.WithResponseInto(&hr))
			msg, err := c.Messages.New(ctx,
				anthropic.MessageNewParams{Model: "openai", MaxTokens: 16, Messages: userText("hello")})
			if err != nil {
				t.Fatalf("anthropic SDK: %v", err)
			}
			if hr.Header.Get("X-Layer0-Engine") != "ok" || len(msg.Content) == 0 || msg.Content[0].Type != "text" {
				t.Errorf("with a fallback: got %+v from %q, want the fallback ok's answer", msg.Content, hr.Header.Get("X-Layer0-Engine"))
			}
		})
	}
}

// TestAnthropicBrokenTwoHundreds has an Anthropic engine answer non-streamed 200s that are not
// messages — an error object without a type (whose message echoes the engine's credential), an
// empty object, another object, a legacy completion — to an Anthropic client, whose request is
// passed through: the attempt fails, the official SDK gets the fallback's answer, and without a
// fallback the client gets a 502 in its format with none of the engine's bytes, never the body
// as a success.
func TestAnthropicBrokenTwoHundreds(t *testing.T) {
	ant, _, base := faultGateway(t)
	f := faultFormats[0]
	for _, tt := range []struct{ name, body string }{
		{"error without a type", `{"error":{"message":"the broken engine got credential sk-UPSTREAMSECRET-abc from 10.0.0.7"}}`},
		{"empty object", `{}`},
		{"another object", `{"broken engine":1}`},
		{"a completion", `{"type":"completion","completion":"Hello from the broken engine","model":"claude"}`},
		{"no type", strings.Replace(f.json, `"type":"message",`, ``, 1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ant.set(func(c *net.TCPConn, _ bool) bool { return respond(c, 200, "application/json", tt.body) })
			status, ct, body := postRaw(t, base, f.path, "anthropic-alone", false)
			var e struct {
				Type  string
				Error struct{ Type, Message string }
			}
			if status != http.StatusBadGateway || !strings.HasPrefix(ct, "application/json") ||
				json.Unmarshal([]byte(body), &e) != nil || e.Type != "error" || e.Error.Message == "" {
				t.Errorf("got %d %s, want a 502 Anthropic error:\n%.500q", status, ct, body)
			}
			for _, leak := range []string{"broken engine", "UPSTREAMSECRET", "10.0.0.7"} {
				if strings.Contains(body, leak) {
					t.Errorf("the engine's bytes (%q) reached the client:\n%.500q", leak, body)
				}
			}
			text, engine := sdkCall(t, base, "anthropic", false)
			if engine != "ok" || !strings.Contains(text, " ") {
				t.Errorf("with a fallback: got %q from %q, want the fallback ok's answer", text, engine)
			}
		})
	}
}

// TestAnthropicEngineContextOverflow: an Anthropic engine's "prompt is too long" keeps saying so
// to every client, with the code clients detect it by: an OpenAI client gets the code
// context_length_exceeded (as from an OpenAI engine), an Anthropic client the message.
func TestAnthropicEngineContextOverflow(t *testing.T) {
	ant, _, base := faultGateway(t)
	ant.set(func(c *net.TCPConn, _ bool) bool {
		return respond(c, 400, "application/json",
			`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`)
	})
	for _, f := range faultFormats {
		for _, stream := range []bool{false, true} {
			status, _, body := postRaw(t, base, f.path, "anthropic-alone", stream)
			var e struct {
				Error struct {
					Message string
					Code    *string
				}
			}
			if status != http.StatusBadRequest || json.Unmarshal([]byte(body), &e) != nil ||
				!strings.HasPrefix(e.Error.Message, "prompt is too long") {
				t.Errorf("%s stream=%v: got %d, want a 400 saying the prompt is too long:\n%.500s", f.name, stream, status, body)
				continue
			}
			if f.name == "openai" && (e.Error.Code == nil || *e.Error.Code != "context_length_exceeded") {
				t.Errorf("%s stream=%v: code %v, want context_length_exceeded:\n%.500s", f.name, stream, e.Error.Code, body)
			}
		}
	}
}
