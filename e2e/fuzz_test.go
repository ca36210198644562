package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzHTTPFront sends arbitrary bytes over a real socket into a gateway with keys: whatever
// arrives, the process keeps serving, and every answer is well-formed HTTP whose errors are
// JSON in a client format (Anthropic's {"type":"error",…} or OpenAI's {"error":{…}}).
//
//	go test -run '^$' -fuzz FuzzHTTPFront -fuzztime 60s .
func FuzzHTTPFront(f *testing.F) {
	msg := `{"model":"sim","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	chat := `{"model":"sim","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	for _, s := range []string{
		"POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: " + hardKey + "\r\nContent-Type: application/json\r\nContent-Length: " + itoa(len(msg)) + "\r\n\r\n" + msg,
		"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " + hardKey + "\r\nContent-Type: application/json\r\nContent-Length: " + itoa(len(chat)) + "\r\n\r\n" + chat,
		"POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello",
		"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: " + hardKey + "\r\n\r\nGET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n",
		"POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: " + hardKey + "\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: " + hardKey + "\r\nContent-Type: application/x-anthropic-binary\r\nContent-Length: 4\r\n\r\nL0\x01\x00",
		"GET /v1/binary/vocab/nope HTTP/1.1\r\nHost: localhost\r\n\r\n",
		"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
		"GET / HTTP/1.1\r\n" + strings.Repeat("X-A: b\r\n", 10000) + "\r\n",
		"",
	} {
		f.Add([]byte(s))
	}
	_, addr, _ := serveListener(f, hardConfig(f, "  read_header_timeout: 2s\n  read_body_timeout: 2s"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(data); err != nil && !isReset(err) {
			t.Fatal(err)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		raw, err := io.ReadAll(c)
		if err != nil && !isReset(err) {
			t.Fatalf("reading the answer: %v (got %q)", err, raw)
		}
		checkAnswers(t, raw)
		healthy(t, addr)
	})
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

// checkAnswers parses every HTTP/1.1 answer in raw; each error's body must be a JSON error.
func checkAnswers(t *testing.T, raw []byte) {
	t.Helper()
	if len(raw) == 0 {
		return // closed without an answer: a request that never completed
	}
	if bytes.HasPrefix(raw, []byte("\x00\x00")) {
		return // an HTTP/2 connection's frames, for a client that spoke HTTP/2
	}
	br := bufio.NewReader(bytes.NewReader(raw))
	for {
		if _, err := br.Peek(1); err == io.EOF {
			return
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("not HTTP: %v: %q", err, raw)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return // the connection ended inside a stream the server cut
		}
		if resp.StatusCode >= 400 {
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" && e.Type != "error" {
				t.Fatalf("status %d: the error is not JSON in a client format (%v): %q", resp.StatusCode, err, body)
			}
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
