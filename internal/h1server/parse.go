package h1server

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// A requestError is a request that cannot be served: the status it is answered with and why.
type requestError struct {
	status int
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(msg string) error { return &requestError{http.StatusBadRequest, msg} }

// errHeadTooLarge is a request line and header block over the server's limit.
var errHeadTooLarge = &requestError{http.StatusRequestHeaderFieldsTooLarge, "request header fields too large"}

// framing is how a request's body is delimited.
type framing struct {
	length    int64 // the body's length; -1 when chunked
	chunked   bool
	close     bool // the connection ends after this request's answer
	expect100 bool // the client waits for "100 Continue" before sending its body
	minor     int  // the HTTP/1.x minor version
}

// parseHead parses a request head — the request line and header fields, each ending in CRLF,
// then an empty line — into r, more strictly than net/http: only HTTP/1.0 and HTTP/1.1, lines
// ending in CRLF only, no line folding, no space before a colon, one Host, at most one
// Content-Length, a Transfer-Encoding only of exactly "chunked" on HTTP/1.1 and never beside
// a Content-Length, no CONNECT. What it accepts it reads as net/http reads it: the same method,
// target, URL, Host and header map (canonical keys, Host removed, Pragma: no-cache completed
// with Cache-Control), and the same body framing.
//
// The strings of r (method, target, header values) are substrings of one copy of head.
func parseHead(head []byte, r *http.Request) (framing, error) {
	var f framing
	if bytes.IndexByte(head, 0) >= 0 {
		return f, badRequest("NUL byte in the request head")
	}
	s := string(head) // the one copy every string of the request shares
	method, target, proto, rest, err := parseRequestLine(s, &f)
	if err != nil {
		return f, err
	}
	u, err := parseTarget(method, target)
	if err != nil {
		return f, err
	}

	h, err := parseFields(rest)
	if err != nil {
		return f, err
	}
	host, err := requestHost(h, u, f.minor)
	if err != nil {
		return f, err
	}

	// Pragma: no-cache without Cache-Control means Cache-Control: no-cache (RFC 9111 §5.4),
	// as net/http fills it in.
	if p := h["Pragma"]; len(p) > 0 && p[0] == "no-cache" {
		if _, ok := h["Cache-Control"]; !ok {
			h["Cache-Control"] = noCache
		}
	}

	if err := bodyFraming(h, &f); err != nil {
		return f, err
	}
	conn := h["Connection"]
	f.close = connectionEnds(conn, f.minor)

	if e := h["Expect"]; len(e) > 0 {
		if len(e) > 1 || !strings.EqualFold(e[0], "100-continue") {
			return f, &requestError{http.StatusExpectationFailed, "unsupported Expect header"}
		}
		f.expect100 = f.minor == 1 && f.length != 0
	}

	r.Method = method
	r.URL = u
	r.RequestURI = target
	r.Proto = proto
	r.ProtoMajor, r.ProtoMinor = 1, f.minor
	r.Header = h
	r.Host = host
	r.ContentLength = f.length
	// r.Close is net/http's reading of the fields (every field's comma-separated tokens); the
	// connection's end (f.close) also takes its first-field reading, and ends it when either
	// says so.
	r.Close = httpguts.HeaderValuesContainsToken(conn, "close") ||
		f.minor == 0 && !httpguts.HeaderValuesContainsToken(conn, "keep-alive")
	f.close = f.close || r.Close
	if f.chunked {
		r.TransferEncoding = chunkedTE
	}
	return f, nil
}

// parseRequestLine parses the request line that starts head s — method, target and protocol
// separated by single spaces, ending in CRLF — and sets f.minor from the protocol. rest is what
// follows the line: the header fields. CONNECT and any protocol but HTTP/1.0 and HTTP/1.1 are
// refused, as is a target with a control, space or non-ASCII byte.
func parseRequestLine(s string, f *framing) (method, target, proto, rest string, err error) {
	eol := strings.Index(s, "\r\n")
	if nl := strings.IndexByte(s, '\n'); nl >= 0 && (eol < 0 || nl < eol+1) {
		return "", "", "", "", badRequest("request line not ending in CRLF")
	}
	if eol < 0 {
		return "", "", "", "", badRequest("malformed request line")
	}
	line := s[:eol]
	rest = s[eol+2:]
	if strings.IndexByte(line, '\n') >= 0 || strings.IndexByte(line, '\r') >= 0 {
		return "", "", "", "", badRequest("malformed request line")
	}
	sp1 := strings.IndexByte(line, ' ')
	if sp1 <= 0 {
		return "", "", "", "", badRequest("malformed request line")
	}
	method = line[:sp1]
	sp2 := strings.IndexByte(line[sp1+1:], ' ')
	if sp2 <= 0 {
		return "", "", "", "", badRequest("malformed request line")
	}
	target = line[sp1+1 : sp1+1+sp2]
	proto = line[sp1+2+sp2:]
	if !validToken(method) {
		return "", "", "", "", badRequest("invalid method")
	}
	switch proto {
	case "HTTP/1.1":
		f.minor = 1
	case "HTTP/1.0":
	default:
		if strings.HasPrefix(proto, "HTTP/") {
			return "", "", "", "", &requestError{http.StatusHTTPVersionNotSupported, "unsupported protocol version " + quoteASCII(proto)}
		}
		return "", "", "", "", badRequest("malformed HTTP version")
	}
	if method == http.MethodConnect {
		// 501, not 405: a 405 must name the methods allowed (Allow), which depend on the path.
		return "", "", "", "", &requestError{http.StatusNotImplemented, "CONNECT is not served: this is not a proxy"}
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c >= 0x7f {
			return "", "", "", "", badRequest("invalid character in the request target")
		}
	}
	return method, target, proto, rest, nil
}

// requestHost is the request's host and removes the Host field from h: exactly one Host field
// on HTTP/1.1 (minor 1), valid; an absolute-form target's authority (u.Host) wins over it.
func requestHost(h http.Header, u *url.URL, minor int) (string, error) {
	hosts := h["Host"]
	switch {
	case len(hosts) > 1:
		return "", badRequest("too many Host headers")
	case len(hosts) == 0 && minor == 1:
		return "", badRequest("missing required Host header")
	case len(hosts) == 1 && !httpguts.ValidHostHeader(hosts[0]):
		return "", badRequest("malformed Host header")
	}
	host := u.Host
	if host == "" && len(hosts) == 1 {
		host = hosts[0]
	}
	delete(h, "Host")
	return host, nil
}

// bodyFraming sets how the body is delimited from the fields h into f: chunked (the
// Transfer-Encoding field then removed from h), a Content-Length, or neither (no body). A
// Transfer-Encoding other than chunked, or on HTTP/1.0, or beside a Content-Length, or
// announcing trailers, is refused, as is more than one Content-Length.
func bodyFraming(h http.Header, f *framing) error {
	cls := h["Content-Length"]
	tes := h["Transfer-Encoding"]
	if len(cls) > 1 {
		return badRequest("more than one Content-Length header")
	}
	if len(tes) > 0 {
		if f.minor == 0 {
			return badRequest("Transfer-Encoding on an HTTP/1.0 request")
		}
		if len(tes) > 1 || !strings.EqualFold(tes[0], "chunked") {
			return &requestError{http.StatusNotImplemented, "unsupported transfer encoding: only chunked is"}
		}
		if len(cls) > 0 {
			return badRequest("both Transfer-Encoding and Content-Length")
		}
		if _, ok := h["Trailer"]; ok {
			// Trailer fields are refused (the body's reader fails on any), so is their
			// announcement.
			return badRequest("trailer fields are not accepted")
		}
		f.chunked, f.length = true, -1
		delete(h, "Transfer-Encoding")
	} else if len(cls) == 1 {
		n, ok := parseLength(cls[0])
		if !ok {
			return badRequest("bad Content-Length " + quoteASCII(cls[0]))
		}
		f.length = n
	}
	return nil
}

// connectionEnds says whether the connection ends after the answer, from the Connection fields
// conn of an HTTP/1.minor request: as net/http decides it (the first Connection field, tokens
// bounded by space, tab or comma), and also whenever any field says close, so that the lean
// server never keeps a connection net/http would end.
func connectionEnds(conn []string, minor int) bool {
	first := ""
	if len(conn) > 0 {
		first = conn[0]
	}
	end := minor == 0 && !hasToken(first, "keep-alive")
	for _, v := range conn {
		if hasToken(v, "close") {
			end = true
		}
	}
	return end
}

// hasToken says v holds token (case-insensitive) between boundaries of space, tab or comma, as
// net/http reads a Connection field.
func hasToken(v, token string) bool {
	for i := 0; i+len(token) <= len(v); i++ {
		if i > 0 && !tokenBoundary(v[i-1]) {
			continue
		}
		if end := i + len(token); end < len(v) && !tokenBoundary(v[end]) {
			continue
		}
		if strings.EqualFold(v[i:i+len(token)], token) {
			return true
		}
	}
	return false
}

func tokenBoundary(b byte) bool { return b == ' ' || b == ',' || b == '\t' }

var (
	noCache   = []string{"no-cache"}
	chunkedTE = []string{"chunked"}
)

// parseTarget parses a request target as net/http does (url.ParseRequestURI), without its
// allocations for the common origin-form target of plain path characters.
func parseTarget(method, target string) (*url.URL, error) {
	if target == "*" {
		if method != http.MethodOptions {
			return nil, badRequest("the asterisk target is only for OPTIONS")
		}
		return &url.URL{Path: "*"}, nil
	}
	if len(target) > 0 && target[0] == '/' && plainPath(target) {
		return &url.URL{Path: target}, nil
	}
	if target[0] != '/' && !hasHTTPScheme(target) {
		return nil, badRequest("invalid request target")
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, badRequest("invalid request target")
	}
	return u, nil
}

// hasHTTPScheme says the target is in absolute form with scheme http or https.
func hasHTTPScheme(t string) bool {
	i := strings.Index(t, "://")
	return i > 0 && (strings.EqualFold(t[:i], "http") || strings.EqualFold(t[:i], "https"))
}

// plainPath says a path has only bytes that url.URL keeps as they are in Path (no escapes, no
// query, nothing its EscapedPath would encode), so that &url.URL{Path: p} is what
// url.ParseRequestURI(p) returns.
func plainPath(p string) bool {
	for i := 0; i < len(p); i++ {
		if !pathByte[p[i]] {
			return false
		}
	}
	return !strings.HasPrefix(p, "//")
}

var pathByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-_.~$&+,/:;=@" {
		t[c] = true
	}
	return t
}()

// parseFields parses the header field lines of a head (after the request line, through the
// empty line) into a header map with canonical keys.
func parseFields(s string) (http.Header, error) {
	n := strings.Count(s, "\n") - 1 // fields, the empty line excluded
	if n < 0 {
		return nil, badRequest("malformed header block")
	}
	h := make(http.Header, n)
	vals := make([]string, n) // one array for every field's value slice
	for {
		eol := strings.IndexByte(s, '\n')
		if eol < 1 || s[eol-1] != '\r' {
			return nil, badRequest("header line not ending in CRLF")
		}
		line := s[:eol-1]
		s = s[eol+1:]
		if line == "" {
			if s != "" {
				return nil, badRequest("malformed header block")
			}
			return h, nil
		}
		if line[0] == ' ' || line[0] == '\t' {
			return nil, badRequest("obsolete line folding in a header")
		}
		colon := strings.IndexByte(line, ':')
		if colon <= 0 {
			return nil, badRequest("malformed header line")
		}
		name := line[:colon]
		if !validToken(name) {
			return nil, badRequest("invalid header name " + quoteASCII(name))
		}
		v := trimOWS(line[colon+1:])
		if !httpguts.ValidHeaderFieldValue(v) {
			return nil, badRequest("invalid value in header " + quoteASCII(name))
		}
		key := canonicalKey(name)
		if old, ok := h[key]; ok {
			h[key] = append(old[:len(old):len(old)], v)
			continue
		}
		vals[0] = v
		h[key] = vals[:1:1]
		vals = vals[1:]
	}
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// validToken says s is a non-empty RFC 9110 token (a method or a field name).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return true
}

// canonicalKey is textproto.CanonicalMIMEHeaderKey for a valid token, without allocating for a
// key already canonical (a substring of the head) or one of the common names.
func canonicalKey(name string) string {
	canonical := true
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			canonical = false
			break
		}
		upper = c == '-'
	}
	if canonical {
		return name
	}
	for _, k := range commonKeys {
		if len(k) == len(name) && strings.EqualFold(k, name) {
			return k
		}
	}
	b := []byte(name)
	upper = true
	for i, c := range b {
		if upper && 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			b[i] = c - 'A' + 'a'
		}
		upper = c == '-'
	}
	return string(b)
}

// commonKeys are the header names that clients commonly send in lower case (HTTP/2 habits in
// HTTP/1.1 libraries), returned without allocating.
var commonKeys = [...]string{
	"Host", "Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Connection",
	"Content-Length", "Content-Type", "User-Agent", "X-Api-Key", "Anthropic-Version",
	"Anthropic-Beta", "X-Stainless-Lang", "X-Stainless-Package-Version", "X-Stainless-Os",
	"X-Stainless-Arch", "X-Stainless-Runtime", "X-Stainless-Runtime-Version",
	"X-Stainless-Retry-Count", "X-Stainless-Timeout", "X-Stainless-Async", "Openai-Organization",
	"Openai-Project", "Origin", "Referer", "Traceparent", "Tracestate", "X-Session-Id",
	"X-Request-Id", "Transfer-Encoding", "Expect", "Cache-Control", "Pragma", "Cookie",
}

// parseLength parses a Content-Length value: digits only, as net/http reads it (leading zeros
// allowed), at most 18 digits.
func parseLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// quoteASCII quotes a client-supplied string for an error message: printable ASCII only, at
// most 64 bytes.
func quoteASCII(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < ' ' || c >= 0x7f || c == '"' || c == '\\' {
			c = '?'
		}
		b = append(b, c)
	}
	return string(append(b, '"'))
}

// errPreface is the start of HTTP/2's client preface seen on a connection's first request line.
var errPreface = errors.New("h1server: HTTP/2 client preface")
