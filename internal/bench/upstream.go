package bench

import (
	"bufio"
	"bytes"
	ebin "encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/layer0ai/layer0/internal/wire/binary"
)

// UpstreamConfig configures the fast upstream. The zero value is usable: 100 tokens, no delays.
type UpstreamConfig struct {
	// Tokens is the number of tokens in every response. Default 100.
	Tokens int
	// TTFT is the delay before the first token. Default 0.
	TTFT time.Duration
	// ITL is the delay between two tokens. Default 0. With both delays zero every response is
	// one precomputed write; otherwise streams are sent chunk by chunk as the tokens come due.
	ITL time.Duration
	// Model is the model name the responses carry. Default "bench-upstream".
	Model string
	// InputTokens is the input token count the responses report. Default 10.
	InputTokens int
}

// Upstream is the fast server benchmarks measure directly and put behind layer0 as its engine,
// so that layer0, not the engine, is what a benchmark sees. It speaks HTTP/1.1 only, with its own
// minimal request reader, and answers every request with a response precomputed at start:
//
//	POST /v1/messages          Anthropic JSON, or SSE when the body has "stream": true, or binary
//	                           protocol frames when Content-Type is application/x-anthropic-binary
//	                           (version 2 when it has version=2 or X-Binary-Version: 2 is sent;
//	                           always token IDs, never text frames)
//	POST /v1/chat/completions  OpenAI JSON, or SSE (with a usage chunk) when "stream": true
//	GET  /v1/models            a one-model list
//
// Request bodies are read and searched for "stream" but not otherwise parsed: max_tokens, the
// model and the messages do not change the answer. The token texts are words from a fixed list,
// one per SSE delta; binary token IDs are 0, 1, 2…, one per frame (they index no vocabulary).
type Upstream struct {
	cfg   UpstreamConfig
	fixed [numUpstreamResponses][]byte   // complete responses, head and body, for zero delays
	parts [numUpstreamResponses][][]byte // body pieces: head events, one per token, tail events

	mu     sync.Mutex
	lns    map[net.Listener]struct{}
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

type upstreamResponse uint8

const (
	upAnthropicJSON upstreamResponse = iota
	upAnthropicSSE
	upOpenAIJSON
	upOpenAISSE
	upBinary
	upBinaryV2
	upModels
	upNotFound
	upBadBinary
	upTooLarge
	numUpstreamResponses
)

// upstreamWords are the token texts, cycled. Plain ASCII, so they need no JSON escaping.
var upstreamWords = []string{" the", " quick", " brown", " fox", " jumps", " over", " a", " lazy",
	" dog", " while", " layer0", " streams", " tokens", " back", " to", " every", " client"}

const upstreamMaxBody = 32 << 20

// NewUpstream precomputes the responses of an upstream.
func NewUpstream(cfg UpstreamConfig) (*Upstream, error) {
	if cfg.Tokens < 0 || cfg.TTFT < 0 || cfg.ITL < 0 || cfg.InputTokens < 0 {
		return nil, errors.New("bench: upstream tokens and delays must not be negative")
	}
	if cfg.Tokens == 0 {
		cfg.Tokens = 100
	}
	if cfg.Tokens > 65535 {
		return nil, fmt.Errorf("bench: upstream tokens %d: at most 65535", cfg.Tokens)
	}
	if cfg.Model == "" {
		cfg.Model = "bench-upstream"
	}
	if cfg.InputTokens == 0 {
		cfg.InputTokens = 10
	}
	u := &Upstream{cfg: cfg, lns: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}}
	u.buildResponses()
	return u, nil
}

func (u *Upstream) buildResponses() {
	c := u.cfg
	m := strconv.Quote(c.Model)
	tok := func(i int) string { return upstreamWords[i%len(upstreamWords)] }
	var text strings.Builder
	for i := range c.Tokens {
		text.WriteString(tok(i))
	}
	one := func(s string) [][]byte { return [][]byte{[]byte(s)} }

	u.parts[upAnthropicJSON] = one(fmt.Sprintf(`{"id":"msg_bench","type":"message","role":"assistant","model":%s,`+
		`"content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,`+
		`"usage":{"input_tokens":%d,"output_tokens":%d}}`, m, text.String(), c.InputTokens, c.Tokens))

	sse := func(event, data string) string { return "event: " + event + "\ndata: " + data + "\n\n" }
	parts := [][]byte{[]byte(
		sse("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_bench","type":"message",`+
			`"role":"assistant","model":%s,"content":[],"stop_reason":null,"stop_sequence":null,`+
			`"usage":{"input_tokens":%d,"output_tokens":1}}}`, m, c.InputTokens)) +
			sse("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`) +
			sse("ping", `{"type":"ping"}`))}
	for i := range c.Tokens {
		parts = append(parts, []byte(sse("content_block_delta",
			fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, tok(i)))))
	}
	parts = append(parts, []byte(sse("content_block_stop", `{"type":"content_block_stop","index":0}`)+
		sse("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},`+
			`"usage":{"output_tokens":%d}}`, c.Tokens))+
		sse("message_stop", `{"type":"message_stop"}`)))
	u.parts[upAnthropicSSE] = parts

	const created = 1700000000
	u.parts[upOpenAIJSON] = one(fmt.Sprintf(`{"id":"chatcmpl-bench","object":"chat.completion","created":%d,"model":%s,`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
		created, m, text.String(), c.InputTokens, c.Tokens, c.InputTokens+c.Tokens))

	chunk := func(rest string) string {
		return fmt.Sprintf(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":%d,"model":%s,%s}`+"\n\n",
			created, m, rest)
	}
	parts = [][]byte{[]byte(chunk(`"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`))}
	for i := range c.Tokens {
		parts = append(parts, []byte(chunk(fmt.Sprintf(`"choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]`, tok(i)))))
	}
	parts = append(parts, []byte(chunk(`"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]`)+
		chunk(fmt.Sprintf(`"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`,
			c.InputTokens, c.Tokens, c.InputTokens+c.Tokens))+
		"data: [DONE]\n\n"))
	u.parts[upOpenAISSE] = parts

	parts = [][]byte{[]byte(binary.Magic)}
	for i := range c.Tokens {
		parts = append(parts, []byte{byte(binary.FrameToken), 0, 2, byte(i >> 8), byte(i)})
	}
	tail := []byte{byte(binary.FrameUsage), 0, 12}
	tail = ebin.BigEndian.AppendUint32(tail, uint32(c.InputTokens))
	tail = ebin.BigEndian.AppendUint32(tail, uint32(c.Tokens))
	tail = ebin.BigEndian.AppendUint32(tail, 0)
	tail = append(tail, byte(binary.FrameDone), 0, 0)
	u.parts[upBinary] = append(parts, tail)

	parts = [][]byte{append([]byte(binary.Magic), byte(binary.V2))}
	for i := range c.Tokens {
		id := ebin.AppendUvarint(nil, uint64(i))
		parts = append(parts, append([]byte{byte(binary.FrameToken), byte(len(id))}, id...))
	}
	var usage []byte
	for _, n := range []int{c.InputTokens, c.Tokens, 0, 0} {
		usage = ebin.AppendUvarint(usage, uint64(n))
	}
	tail = append([]byte{byte(binary.FrameUsage), byte(len(usage))}, usage...)
	tail = append(tail, byte(binary.FrameDone), 0)
	u.parts[upBinaryV2] = append(parts, tail)

	u.parts[upModels] = one(fmt.Sprintf(`{"object":"list","data":[{"id":%s,"object":"model","type":"model",`+
		`"display_name":%s,"created":%d,"created_at":"2023-11-14T22:13:20Z","owned_by":"layer0-bench"}],`+
		`"has_more":false,"first_id":%s,"last_id":%s}`, m, m, created, m, m))
	u.parts[upNotFound] = one(`{"type":"error","error":{"type":"not_found_error","message":"bench upstream: no such path"}}`)
	u.parts[upBadBinary] = one(`{"type":"error","error":{"type":"invalid_request_error","message":"bench upstream: body does not start with the binary magic ANTH"}}`)
	u.parts[upTooLarge] = one(`{"type":"error","error":{"type":"request_too_large","message":"bench upstream: body too large"}}`)

	for r := range numUpstreamResponses {
		var body []byte
		for _, p := range u.parts[r] {
			body = append(body, p...)
		}
		u.fixed[r] = append(u.head(r, len(body)), body...)
	}
}

// head is the response head of r; a negative length means chunked.
func (u *Upstream) head(r upstreamResponse, length int) []byte {
	status, ctype, extra := "200 OK", "application/json", ""
	switch r {
	case upAnthropicSSE, upOpenAISSE:
		ctype, extra = "text/event-stream", "Cache-Control: no-cache\r\n"
	case upBinary:
		ctype = binaryContentType
	case upBinaryV2:
		ctype = binary.Mode{Version: binary.V2}.ContentType()
	case upNotFound:
		status = "404 Not Found"
	case upBadBinary:
		status, extra = "400 Bad Request", "X-Error-Code: INVALID_BINARY\r\n"
	case upTooLarge:
		status, extra = "413 Request Entity Too Large", "Connection: close\r\n"
	}
	framing := "Content-Length: " + strconv.Itoa(length)
	if length < 0 {
		framing = "Transfer-Encoding: chunked"
	}
	return []byte("HTTP/1.1 " + status + "\r\nContent-Type: " + ctype + "\r\n" + extra +
		"Request-Id: req_bench\r\n" + framing + "\r\n\r\n")
}

// Serve accepts connections on ln until Close; it returns nil after Close, or the accept error.
func (u *Upstream) Serve(ln net.Listener) error {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return ln.Close()
	}
	u.lns[ln] = struct{}{}
	u.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			u.mu.Lock()
			closed := u.closed
			delete(u.lns, ln)
			u.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("bench: upstream accept: %w", err)
		}
		u.mu.Lock()
		if u.closed {
			u.mu.Unlock()
			_ = c.Close()
			return nil
		}
		u.conns[c] = struct{}{}
		u.wg.Add(1)
		u.mu.Unlock()
		go u.serveConn(c)
	}
}

// Close stops every Serve, closes every connection and waits for their handlers to return.
func (u *Upstream) Close() error {
	u.mu.Lock()
	u.closed = true
	var err error
	for ln := range u.lns {
		err = errors.Join(err, ln.Close())
	}
	for c := range u.conns {
		_ = c.Close()
	}
	u.mu.Unlock()
	u.wg.Wait()
	return err
}

// serveConn answers the requests of one keep-alive connection in order.
func (u *Upstream) serveConn(c net.Conn) {
	defer func() {
		_ = c.Close()
		u.mu.Lock()
		delete(u.conns, c)
		u.mu.Unlock()
		u.wg.Done()
	}()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	br := bufio.NewReaderSize(c, 16<<10)
	var body, out []byte
	for {
		req, err := readUpstreamRequest(br, body[:0])
		if err != nil {
			if errors.Is(err, errUpstreamTooLarge) {
				_, _ = c.Write(u.fixed[upTooLarge])
			}
			return
		}
		body = req.body
		if req.expect {
			if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
				return
			}
		}
		r := u.route(&req)
		if u.cfg.TTFT == 0 && u.cfg.ITL == 0 || r >= upModels {
			if _, err := c.Write(u.fixed[r]); err != nil {
				return
			}
		} else if out, err = u.writePaced(c, r, out); err != nil {
			return
		}
		if req.close {
			return
		}
	}
}

// ServeHTTP answers like the HTTP/1.1 server, through net/http: it lets the same responses be
// served over HTTP/2 (TLS or h2c) and in tests, at net/http's cost. Delays are not applied.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := upstreamRequest{post: r.Method == http.MethodPost,
		binary: strings.HasPrefix(r.Header.Get("Content-Type"), binaryContentType)}
	if v, err := binary.NegotiateVersion(r.Header); err == nil && v == binary.V2 {
		req.binaryV2 = true
	}
	switch r.URL.Path {
	case pathMessages, pathOpenAI, pathModels:
		req.path = r.URL.Path
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, upstreamMaxBody+1))
	if err != nil {
		return
	}
	req.body = body
	resp := u.fixed[upTooLarge]
	if len(body) <= upstreamMaxBody {
		resp = u.fixed[u.route(&req)]
	}
	// Replay the precomputed head's status and headers, then the body.
	head, payload, _ := bytes.Cut(resp, []byte("\r\n\r\n"))
	lines := strings.Split(string(head), "\r\n")
	status, _ := strconv.Atoi(strings.Fields(lines[0])[1])
	for _, l := range lines[1:] {
		k, v, _ := strings.Cut(l, ": ")
		if k != "Content-Length" && k != "Connection" {
			w.Header().Set(k, v)
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write(payload)
}

// route picks the response for a request.
func (u *Upstream) route(req *upstreamRequest) upstreamResponse {
	switch {
	case req.path == pathModels && !req.post:
		return upModels
	case req.path == pathOpenAI && req.post:
		if wantsStream(req.body) {
			return upOpenAISSE
		}
		return upOpenAIJSON
	case req.path == pathMessages && req.post && req.binary:
		if !binary.LooksBinary(req.body) {
			return upBadBinary
		}
		if req.binaryV2 {
			return upBinaryV2
		}
		return upBinary
	case req.path == pathMessages && req.post:
		if wantsStream(req.body) {
			return upAnthropicSSE
		}
		return upAnthropicJSON
	}
	return upNotFound
}

// writePaced sends response r with the configured delays: the head at once; after TTFT the
// opening events with the first token; then each further token after ITL; then the closing
// events. Each piece is one HTTP chunk and one write.
func (u *Upstream) writePaced(c net.Conn, r upstreamResponse, out []byte) ([]byte, error) {
	if r == upAnthropicJSON || r == upOpenAIJSON { // a whole answer, once generated
		time.Sleep(u.cfg.TTFT + time.Duration(u.cfg.Tokens-1)*u.cfg.ITL)
		_, err := c.Write(u.fixed[r])
		return out, err
	}
	parts := u.parts[r] // opening, Tokens tokens (at least one), closing
	if _, err := c.Write(u.head(r, -1)); err != nil {
		return out, err
	}
	time.Sleep(u.cfg.TTFT)
	last := len(parts) - 1
	for i := 1; i <= last; i++ {
		out = out[:0]
		if i == 1 {
			out = appendChunk(out, parts[0])
		}
		if i > 1 && i < last {
			time.Sleep(u.cfg.ITL)
		}
		out = appendChunk(out, parts[i])
		if i == last {
			out = append(out, "0\r\n\r\n"...)
		}
		if _, err := c.Write(out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// appendChunk appends p as one chunk of a chunked body.
func appendChunk(out, p []byte) []byte {
	out = strconv.AppendInt(out, int64(len(p)), 16)
	out = append(out, '\r', '\n')
	out = append(out, p...)
	return append(out, '\r', '\n')
}

var errUpstreamTooLarge = errors.New("bench: upstream request body too large")

// Upstream paths.
const (
	pathMessages = "/v1/messages"
	pathOpenAI   = "/v1/chat/completions"
	pathModels   = "/v1/models"
)

type upstreamRequest struct {
	post, binary, binaryV2 bool
	expect, close          bool
	path                   string // one of the path constants, or "" for any other
	body                   []byte
}

// readUpstreamRequest reads one HTTP/1.1 request, its body appended to body.
func readUpstreamRequest(br *bufio.Reader, body []byte) (upstreamRequest, error) {
	var req upstreamRequest
	line, err := upstreamLine(br)
	if err != nil {
		return req, err
	}
	// "POST /v1/messages?beta=true HTTP/1.1"
	sp1 := bytes.IndexByte(line, ' ')
	sp2 := bytes.LastIndexByte(line, ' ')
	if sp1 <= 0 || sp2 <= sp1 {
		return req, fmt.Errorf("bench: upstream: malformed request line %q", line)
	}
	req.post = string(line[:sp1]) == "POST"
	target := line[sp1+1 : sp2]
	if q := bytes.IndexByte(target, '?'); q >= 0 {
		target = target[:q]
	}
	switch string(target) {
	case pathMessages:
		req.path = pathMessages
	case pathOpenAI:
		req.path = pathOpenAI
	case pathModels:
		req.path = pathModels
	}
	req.close = bytes.HasSuffix(line, []byte("HTTP/1.0"))
	length, chunked := int64(0), false
	for {
		line, err = upstreamLine(br)
		if err != nil {
			return req, err
		}
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			continue
		}
		name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			length, err = strconv.ParseInt(string(value), 10, 64)
			if err != nil || length < 0 {
				return req, fmt.Errorf("bench: upstream: bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			req.close = bytes.EqualFold(value, []byte("close"))
		case bytes.EqualFold(name, []byte("Content-Type")):
			req.binary = bytes.HasPrefix(value, []byte(binaryContentType))
			req.binaryV2 = req.binaryV2 || bytes.Contains(value, []byte("version=2"))
		case bytes.EqualFold(name, []byte(binary.VersionHeader)):
			req.binaryV2 = req.binaryV2 || bytes.Equal(value, []byte("2"))
		case bytes.EqualFold(name, []byte("Expect")):
			req.expect = bytes.EqualFold(value, []byte("100-continue"))
		}
	}
	if chunked {
		req.body, err = readChunkedBody(br, body)
		return req, err
	}
	if length > upstreamMaxBody {
		return req, errUpstreamTooLarge
	}
	n := len(body)
	body = append(body, make([]byte, length)...)[:n+int(length)]
	if _, err := io.ReadFull(br, body[n:]); err != nil {
		return req, err
	}
	req.body = body
	return req, nil
}

func readChunkedBody(br *bufio.Reader, body []byte) ([]byte, error) {
	for {
		line, err := upstreamLine(br)
		if err != nil {
			return body, err
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		size, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 31)
		if err != nil {
			return body, fmt.Errorf("bench: upstream: bad chunk size %q", line)
		}
		if size == 0 {
			for {
				line, err := upstreamLine(br)
				if err != nil || len(line) == 0 {
					return body, err
				}
			}
		}
		if len(body)+int(size) > upstreamMaxBody {
			return body, errUpstreamTooLarge
		}
		n := len(body)
		body = append(body, make([]byte, size)...)[:n+int(size)]
		if _, err := io.ReadFull(br, body[n:]); err != nil {
			return body, err
		}
		if line, err := upstreamLine(br); err != nil || len(line) != 0 {
			return body, errors.Join(err, errors.New("bench: upstream: chunk not followed by CRLF"))
		}
	}
}

func upstreamLine(br *bufio.Reader) ([]byte, error) {
	l, err := br.ReadSlice('\n')
	if err != nil {
		if err == bufio.ErrBufferFull {
			return nil, errors.New("bench: upstream: header line too long")
		}
		return nil, err
	}
	l = l[:len(l)-1]
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	return l, nil
}

// wantsStream reports whether a JSON body has "stream": true.
func wantsStream(body []byte) bool {
	v, ok := jsonValue(body, []byte(`"stream"`))
	return ok && bytes.HasPrefix(v, []byte("true"))
}
