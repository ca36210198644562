package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"time"

	"github.com/layer0ai/layer0/client"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/sse"
)

// API names, as Call and the report spell them.
const (
	Anthropic = "anthropic" // the Messages API, streamed (SSE)
	OpenAI    = "openai"    // Chat Completions, streamed (SSE)
	Binary    = "binary"    // layer0's binary streaming protocol, version 2 with text frames
)

// APIs are every API a probe tries, in order.
var APIs = []string{Anthropic, OpenAI, Binary}

// Call is one small streaming request to one API.
type Call struct {
	// API is Anthropic, OpenAI or Binary.
	API string
	// Base is the server's base URL, without a trailing slash.
	Base string
	// Key is sent as x-api-key (Anthropic, binary) or as a Bearer token (OpenAI) when set.
	Key    string
	Model  string
	Prompt string
	// MaxTokens bounds the answer; 0 means 16.
	MaxTokens int
	// Header is added to the request (X-Layer0-Debug, for one).
	Header http.Header
	// OnText, when set, receives each piece of the answer's text as it arrives.
	OnText func(string)
}

// Exchange is what one Call saw. Times are from the moment the request was sent.
type Exchange struct {
	API  string `json:"api"`
	Path string `json:"path"`
	// Present is false when the server does not serve this API: a 404 or 405, or (for the
	// binary protocol) a 400 or 415, or an answer that is not a binary stream.
	Present bool   `json:"present"`
	Status  int    `json:"status,omitempty"`
	Proto   string `json:"proto,omitempty"`
	Error   string `json:"error,omitempty"`
	// TTFBMs is the time to the response's first byte, FirstTokenMs to the first content, and
	// EndMs to the end of the stream.
	TTFBMs       float64 `json:"ttfb_ms,omitempty"`
	FirstTokenMs float64 `json:"first_token_ms,omitempty"`
	EndMs        float64 `json:"end_ms,omitempty"`
	// Bytes is the response body's size; Tokens the output tokens the server reported (the
	// content deltas when it reported none); BytesPerToken their ratio.
	Bytes         int64   `json:"bytes,omitempty"`
	Tokens        int     `json:"tokens,omitempty"`
	Deltas        int     `json:"deltas,omitempty"`
	BytesPerToken float64 `json:"bytes_per_token,omitempty"`
	// Headers are the response headers that matter: X-Request-ID (or the Anthropic API's
	// Request-Id), X-Processing-Time, X-Response-Time, Server, Alt-Svc, X-Layer0-Trace-Id,
	// Content-Type.
	Headers map[string]string `json:"headers,omitempty"`
	// Text is the answer.
	Text string `json:"text,omitempty"`
	// Trace is the decision trace the stream ended with (": layer0-trace {…}"), when the server
	// sent one.
	Trace json.RawMessage `json:"trace,omitempty"`
}

// reportedHeaders are the response headers an Exchange keeps.
var reportedHeaders = []string{"X-Request-Id", "Request-Id", "X-Processing-Time", "X-Response-Time", "Server", "Alt-Svc",
	"X-Layer0-Trace-Id", "Content-Type"}

// Stream sends c over hc and reads the answer to its end. A transport failure or a non-200
// answer is in the Exchange's Error, not returned; the error is for a Call that cannot be made.
func Stream(ctx context.Context, hc *http.Client, c Call) (*Exchange, error) {
	if c.MaxTokens == 0 {
		c.MaxTokens = 16
	}
	x := &Exchange{API: c.API, Path: "/v1/messages"}
	if c.API == OpenAI {
		x.Path = "/v1/chat/completions"
	}
	start := time.Now()
	var ttfb time.Duration
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotFirstResponseByte: func() { ttfb = time.Since(start) },
	})
	body := &countingBody{}
	hc = countingClient(hc, body)
	var err error
	switch c.API {
	case Anthropic, OpenAI:
		err = streamSSE(ctx, hc, &c, x, start)
	case Binary:
		err = streamBinary(ctx, hc, &c, x, start)
	default:
		return nil, fmt.Errorf("probe: unknown API %q (want %s)", c.API, strings.Join(APIs, ", "))
	}
	if err != nil {
		x.Error = err.Error()
	}
	x.TTFBMs, x.Bytes = ms(ttfb), body.n
	if x.Tokens == 0 {
		x.Tokens = x.Deltas
	}
	if x.Tokens > 0 {
		x.BytesPerToken = float64(x.Bytes) / float64(x.Tokens)
	}
	return x, nil
}

// keep records the response's status, protocol and headers, and whether the API is there.
func (x *Exchange) keep(resp *http.Response) {
	x.Status, x.Proto = resp.StatusCode, resp.Proto
	x.Present = resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed
	x.Headers = map[string]string{}
	for _, h := range reportedHeaders {
		if v := resp.Header.Get(h); v != "" {
			x.Headers[h] = v
		}
	}
}

// delta notes one piece of the answer: the first token's time, the count, the text.
func (x *Exchange) delta(start time.Time, s string, text *strings.Builder, onText func(string)) {
	if x.Deltas == 0 {
		x.FirstTokenMs = ms(time.Since(start))
	}
	x.Deltas++
	text.WriteString(s)
	if onText != nil {
		onText(s)
	}
}

// streamSSE runs an Anthropic or OpenAI streaming request.
func streamSSE(ctx context.Context, hc *http.Client, c *Call, x *Exchange, start time.Time) error {
	msgs := []map[string]string{{"role": "user", "content": c.Prompt}}
	req := map[string]any{"model": c.Model, "max_tokens": c.MaxTokens, "stream": true, "messages": msgs}
	if c.API == OpenAI {
		req["stream_options"] = map[string]bool{"include_usage": true}
	}
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encoding the request: %w", err)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Base+x.Path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	for k, v := range c.Header {
		hr.Header[k] = v
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "text/event-stream")
	if c.API == Anthropic {
		hr.Header.Set("Anthropic-Version", "2023-06-01")
		if c.Key != "" {
			hr.Header.Set("X-Api-Key", c.Key)
		}
	} else if c.Key != "" {
		hr.Header.Set("Authorization", "Bearer "+c.Key)
	}
	resp, err := hc.Do(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	x.keep(resp)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		x.EndMs = ms(time.Since(start))
		return fmt.Errorf("%s: %s", resp.Status, ErrorMessage(b))
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return fmt.Errorf("answered %q, not a stream (text/event-stream)", ct)
	}
	var text strings.Builder
	var streamErr error
	err = readSSE(resp.Body, func(comment, data []byte) {
		if comment != nil {
			if t, ok := bytes.CutPrefix(comment, []byte(" layer0-trace ")); ok && json.Valid(t) {
				// Kept only when it is JSON: the report is rendered with it (--json).
				x.Trace = append(json.RawMessage(nil), t...)
			}
			return
		}
		var delta string
		if c.API == Anthropic {
			delta, streamErr = anthropicEvent(data, x, streamErr)
		} else {
			delta, streamErr = openAIEvent(data, x, streamErr)
		}
		if delta != "" {
			x.delta(start, delta, &text, c.OnText)
		}
	})
	x.EndMs, x.Text = ms(time.Since(start)), text.String()
	if err != nil {
		return fmt.Errorf("reading the stream: %w", err)
	}
	return streamErr
}

// anthropicEvent reads one Messages API event: its text, the output tokens, an error event.
func anthropicEvent(data []byte, x *Exchange, prev error) (string, error) {
	var ev struct {
		Type  string `json:"type"`
		Delta struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"delta"`
		Usage struct {
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return "", prev
	}
	switch ev.Type {
	case "content_block_delta":
		if ev.Delta.Type == "text_delta" {
			return ev.Delta.Text, prev
		}
	case "message_delta":
		if ev.Usage.OutputTokens > 0 {
			x.Tokens = ev.Usage.OutputTokens
		}
	case "error":
		return "", fmt.Errorf("the stream ended with an error: %s: %s", ev.Error.Type, ev.Error.Message)
	}
	return "", prev
}

// openAIEvent reads one Chat Completions chunk: its content, the usage chunk, an error.
func openAIEvent(data []byte, x *Exchange, prev error) (string, error) {
	if bytes.Equal(data, []byte("[DONE]")) {
		return "", prev
	}
	var ch struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
		Usage *struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &ch) != nil {
		return "", prev
	}
	if ch.Error != nil {
		return "", fmt.Errorf("the stream ended with an error: %s", ch.Error.Message)
	}
	if ch.Usage != nil && ch.Usage.CompletionTokens > 0 {
		x.Tokens = ch.Usage.CompletionTokens
	}
	if len(ch.Choices) > 0 {
		return ch.Choices[0].Delta.Content, prev
	}
	return "", prev
}

// maxEvent bounds one SSE event (sse.MaxEvent): a server that sends data lines without the
// blank line that ends an event is refused past it.
const maxEvent = sse.MaxEvent

// readSSE calls fn for each comment line (comment set, without its colon) and each event's data
// (data set; several data lines joined by "\n"), until the body ends. Lines that are no SSE
// field are skipped, as the SSE grammar says.
func readSSE(r io.Reader, fn func(comment, data []byte)) error {
	er := sse.NewReader(r)
	er.Lenient = true
	for {
		raw, _, data, err := er.Next()
		if err != nil && !errors.Is(err, io.EOF) {
			if errors.Is(err, sse.ErrEventTooLarge) {
				return fmt.Errorf("an event larger than %d bytes: %w", maxEvent, err)
			}
			return fmt.Errorf("reading the event stream: %w", err)
		}
		hasData := false // an empty data line makes an event too
		for rest := raw; len(rest) > 0; {
			line := rest
			if i := bytes.IndexByte(rest, '\n'); i >= 0 {
				line, rest = rest[:i], rest[i+1:]
			} else {
				rest = nil
			}
			line = bytes.TrimSuffix(line, []byte("\r"))
			switch {
			case len(line) > 0 && line[0] == ':':
				fn(line[1:], nil)
			case bytes.HasPrefix(line, []byte("data:")):
				hasData = true
			}
		}
		if hasData {
			fn(nil, data)
		}
		if err != nil {
			return nil // io.EOF
		}
	}
}

// streamBinary runs a binary-protocol request (version 2, text frames: no vocabulary needed)
// through layer0's Go client.
func streamBinary(ctx context.Context, hc *http.Client, c *Call, x *Exchange, start time.Time) error {
	cl, err := client.New(client.Options{BaseURL: c.Base, APIKey: c.Key, Protocol: client.Binary2Text,
		HTTPClient: hc, Header: c.Header})
	if err != nil {
		return err
	}
	req := &llm.Request{Model: c.Model, MaxTokens: c.MaxTokens, Stream: true,
		Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: c.Prompt}}}}}
	s, err := cl.Stream(ctx, req)
	if err != nil {
		x.EndMs = ms(time.Since(start))
		var e *client.Error
		if errors.As(err, &e) {
			// A server that does not speak the protocol refuses the body it cannot read (400,
			// 415) or the path (404, 405); a well-formed binary request gets neither from one
			// that does.
			x.Status = e.Status()
			switch x.Status {
			case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusUnsupportedMediaType:
			default:
				x.Present = true
			}
			return fmt.Errorf("%d: %s", x.Status, e.Message)
		}
		if strings.Contains(err.Error(), "not the binary protocol") {
			x.Status = http.StatusOK // the server answered, in another format
		}
		return err
	}
	x.keep(s.HTTPResponse())
	var text strings.Builder
	for ev, err := range s.Events() {
		if err != nil {
			x.EndMs, x.Text = ms(time.Since(start)), text.String()
			return err
		}
		switch ev.Kind {
		case llm.EventTextDelta:
			x.delta(start, ev.Text, &text, c.OnText)
		case llm.EventStop:
			x.Tokens = ev.Usage.OutputTokens
		}
	}
	x.EndMs, x.Text = ms(time.Since(start)), text.String()
	return nil
}

// countingBody counts the bytes of the response bodies read through countingClient.
type countingBody struct{ n int64 }

// countingClient is hc with every response body counted into n.
func countingClient(hc *http.Client, n *countingBody) *http.Client {
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	c := *hc
	c.Transport = roundTripper(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err == nil {
			resp.Body = &countedBody{ReadCloser: resp.Body, n: &n.n}
		}
		return resp, err
	})
	return &c
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type countedBody struct {
	io.ReadCloser
	n *int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	*b.n += int64(n)
	return n, err
}

// ErrorMessage is the message of an error body in the Anthropic or OpenAI format, or the body,
// shortened.
func ErrorMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		return e.Error.Message
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
