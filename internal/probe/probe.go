// Package probe inspects an LLM endpoint the way a client meets it: DNS, the TCP connect, the
// TLS handshake (version, cipher suite, ALPN offered and negotiated, the certificate), the
// HTTP/2 SETTINGS the server sends, Alt-Svc and an HTTP/3 handshake, then one small streaming
// request per API the server speaks (Anthropic Messages, OpenAI Chat Completions, layer0's
// binary protocol) with its times, size and the headers that matter. It works against layer0
// and against any other server: an API is detected by trying it, and a 404 means it is absent.
// `layer0 probe` is a thin layer over Run; `layer0 debug --verbose` sends its request with
// Stream.
package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/http2"
)

// ALPNOffered are the protocols the probe offers in its TLS handshake, in order of preference.
var ALPNOffered = []string{"anthropic-v3", "h2", "http/1.1"}

// Options configure a probe.
type Options struct {
	// URL is the server's base URL: http:// or https://, with or without a path prefix.
	URL string
	// Key is the API key sent with the API requests, if any.
	Key string
	// Model is the model the API requests ask for; "" takes the first of GET /v1/models, or
	// "sim" when the server lists none.
	Model string
	// Prompt is the API requests' user message; "" means "Say hello.".
	Prompt string
	// MaxTokens bounds each answer; 0 means 16.
	MaxTokens int
	// Insecure skips certificate verification; RootCAs (nil: the system's) verify otherwise.
	Insecure bool
	RootCAs  *x509.CertPool
	// Timeout bounds each step (the DNS lookup, the connect, the handshake, each request);
	// 0 means 10s.
	Timeout time.Duration
}

// Report is what a probe found. A step that failed has its Error set; the steps after it that
// need it are absent.
type Report struct {
	URL   string `json:"url"`
	DNS   *DNS   `json:"dns,omitempty"`
	TCP   *TCP   `json:"tcp,omitempty"`
	TLS   *TLS   `json:"tls,omitempty"`
	HTTP2 *HTTP2 `json:"http2,omitempty"`
	HTTP3 *HTTP3 `json:"http3,omitempty"`
	Model string `json:"model,omitempty"`
	// ModelGuessed says why Model is a guess ("sim") rather than a model the server listed:
	// GET /v1/models failed (a keyed gateway without --key answers 401) or listed none.
	ModelGuessed string     `json:"model_guessed,omitempty"`
	APIs         []Exchange `json:"apis,omitempty"`
}

// DNS is the host's resolution.
type DNS struct {
	Host    string   `json:"host"`
	Addrs   []string `json:"addrs,omitempty"`
	Literal bool     `json:"literal,omitempty"` // the host is an IP address: nothing to resolve
	Ms      float64  `json:"ms"`
	Error   string   `json:"error,omitempty"`
}

// TCP is the connect to the first address.
type TCP struct {
	Addr  string  `json:"addr"`
	Ms    float64 `json:"ms"`
	Error string  `json:"error,omitempty"`
}

// TLS is the handshake and the server's certificate.
type TLS struct {
	Version     string   `json:"version,omitempty"`
	CipherSuite string   `json:"cipher_suite,omitempty"`
	ALPNOffered []string `json:"alpn_offered"`
	ALPN        string   `json:"alpn,omitempty"` // negotiated; "" when the server chose none
	Subject     string   `json:"subject,omitempty"`
	Issuer      string   `json:"issuer,omitempty"`
	Names       []string `json:"names,omitempty"` // DNS names and IP addresses
	NotAfter    string   `json:"not_after,omitempty"`
	Verified    bool     `json:"verified"`
	Ms          float64  `json:"ms"`
	Error       string   `json:"error,omitempty"`
}

// HTTP2 is the SETTINGS frame the server opened its HTTP/2 connection with.
type HTTP2 struct {
	// Over is how HTTP/2 was reached: "tls" (ALPN h2 or anthropic-v3) or "h2c" (cleartext, prior
	// knowledge).
	Over     string    `json:"over"`
	Settings []Setting `json:"settings,omitempty"`
	Ms       float64   `json:"ms"`
	Error    string    `json:"error,omitempty"`
}

// Setting is one SETTINGS parameter, by its RFC name without the SETTINGS_ prefix.
type Setting struct {
	Name  string `json:"name"`
	ID    uint16 `json:"id"`
	Value uint32 `json:"value"`
}

// Get is the value of the setting named name, and whether the server sent it.
func (h *HTTP2) Get(name string) (uint32, bool) {
	for _, s := range h.Settings {
		if s.Name == name {
			return s.Value, true
		}
	}
	return 0, false
}

// HTTP3 is the server's HTTP/3 advertisement and, when there is one, a QUIC handshake with it.
type HTTP3 struct {
	AltSvc     string  `json:"alt_svc,omitempty"`
	Advertised bool    `json:"advertised"`
	Addr       string  `json:"addr,omitempty"`
	Connected  bool    `json:"connected"`
	ALPN       string  `json:"alpn,omitempty"`
	Ms         float64 `json:"ms,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// Run probes o.URL. The error is for options that cannot be probed (a bad URL); what the
// server did is in the Report.
func Run(ctx context.Context, o Options) (*Report, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("probe: %q is not an http:// or https:// URL", o.URL)
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Prompt == "" {
		o.Prompt = "Say hello."
	}
	secure := u.Scheme == "https"
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
		if secure {
			port = "443"
		}
	}
	r := &Report{URL: o.URL}
	tc := &tls.Config{ServerName: host, RootCAs: o.RootCAs, InsecureSkipVerify: o.Insecure} //nolint:gosec // --insecure is the operator's choice

	// DNS, then TCP to the first address that answers.
	r.DNS = resolve(ctx, host, o.Timeout)
	if r.DNS.Error != "" {
		return r, nil
	}
	var conn net.Conn
	if conn, r.TCP = connect(ctx, r.DNS.Addrs, port, o.Timeout); conn == nil {
		return r, nil
	}
	ip, _, _ := net.SplitHostPort(r.TCP.Addr)

	// TLS, and HTTP/2's SETTINGS on the same connection.
	if secure {
		var tconn *tls.Conn
		tconn, r.TLS = handshake(ctx, conn, tc, o.Timeout)
		if r.TLS.Error != "" {
			conn.Close()
			return r, nil
		}
		if r.TLS.ALPN == "h2" || r.TLS.ALPN == "anthropic-v3" {
			r.HTTP2 = readSettings(tconn, "tls", o.Timeout)
		}
		tconn.Close()
	} else {
		r.HTTP2 = readSettings(conn, "h2c", o.Timeout)
		conn.Close()
	}

	// The APIs, over the HTTP version a client would use: HTTP/2 where the server speaks it.
	base := strings.TrimRight(o.URL, "/")
	hc := httpClient(tc, secure && r.TLS.ALPN != "" && r.TLS.ALPN != "http/1.1", !secure && r.HTTP2.Error == "", o.Timeout)
	defer hc.CloseIdleConnections()
	r.Model = o.Model
	var altSvc string
	if r.Model == "" {
		r.Model, altSvc, r.ModelGuessed = firstModel(ctx, hc, base, o.Key)
	}
	for _, api := range APIs {
		x, err := Stream(ctx, hc, Call{API: api, Base: base, Key: o.Key, Model: r.Model, Prompt: o.Prompt, MaxTokens: o.MaxTokens})
		if err != nil {
			return nil, err
		}
		if v := x.Headers["Alt-Svc"]; v != "" {
			altSvc = v
		}
		r.APIs = append(r.APIs, *x)
	}

	if secure {
		r.HTTP3 = dialHTTP3(ctx, altSvc, ip, tc, o.Timeout)
	}
	return r, nil
}

// resolve looks host up (an IP address is taken as it is).
func resolve(ctx context.Context, host string, timeout time.Duration) *DNS {
	d := &DNS{Host: host}
	if ip := net.ParseIP(host); ip != nil {
		d.Addrs, d.Literal = []string{ip.String()}, true
		return d
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t0 := time.Now()
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	d.Ms = ms(time.Since(t0))
	if err == nil && len(ips) == 0 {
		err = errors.New("no addresses")
	}
	if err != nil {
		d.Error = err.Error()
		return d
	}
	for _, ip := range ips {
		d.Addrs = append(d.Addrs, ip.String())
	}
	return d
}

// connect dials the addresses in turn, as a client would, and reports the first connect that
// succeeded (or every failure).
func connect(ctx context.Context, addrs []string, port string, timeout time.Duration) (net.Conn, *TCP) {
	var errs []string
	t := &TCP{}
	for _, a := range addrs {
		t.Addr = net.JoinHostPort(a, port)
		t0 := time.Now()
		conn, err := (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp", t.Addr)
		t.Ms = ms(time.Since(t0))
		if err == nil {
			return conn, t
		}
		errs = append(errs, err.Error())
	}
	t.Error = strings.Join(errs, "; ")
	return nil, t
}

// handshake runs a TLS handshake on conn offering ALPNOffered, and reports it.
func handshake(ctx context.Context, conn net.Conn, tc *tls.Config, timeout time.Duration) (*tls.Conn, *TLS) {
	c := tc.Clone()
	c.NextProtos = ALPNOffered
	r := &TLS{ALPNOffered: ALPNOffered, Verified: !tc.InsecureSkipVerify}
	tconn := tls.Client(conn, c)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t0 := time.Now()
	err := tconn.HandshakeContext(ctx)
	r.Ms = ms(time.Since(t0))
	if err != nil {
		r.Error, r.Verified = err.Error(), false
		return tconn, r
	}
	st := tconn.ConnectionState()
	r.Version, r.CipherSuite, r.ALPN = tls.VersionName(st.Version), tls.CipherSuiteName(st.CipherSuite), st.NegotiatedProtocol
	if len(st.PeerCertificates) > 0 {
		cert := st.PeerCertificates[0]
		r.Subject, r.Issuer = cert.Subject.String(), cert.Issuer.String()
		r.NotAfter = cert.NotAfter.UTC().Format(time.RFC3339)
		r.Names = append(r.Names, cert.DNSNames...)
		for _, ip := range cert.IPAddresses {
			r.Names = append(r.Names, ip.String())
		}
	}
	return tconn, r
}

// readSettings opens HTTP/2 on conn (the client preface and an empty SETTINGS frame) and reads
// frames until the server's own SETTINGS. Over cleartext this is h2c with prior knowledge; a
// server that does not speak it answers something that is not a frame, or closes.
func readSettings(conn net.Conn, over string, timeout time.Duration) *HTTP2 {
	r := &HTTP2{Over: over}
	t0 := time.Now()
	defer func() { r.Ms = ms(time.Since(t0)) }()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		r.Error = err.Error()
		return r
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		r.Error = fmt.Errorf("writing the HTTP/2 preface: %w", err).Error()
		return r
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		r.Error = fmt.Errorf("writing SETTINGS: %w", err).Error()
		return r
	}
	for range 8 { // the server's SETTINGS comes first; allow a few frames before it
		f, err := fr.ReadFrame()
		if err != nil {
			if strings.Contains(err.Error(), "looked like an HTTP/1.1 header") {
				r.Error = "not spoken: the server answered the HTTP/2 preface in HTTP/1.1"
			} else {
				r.Error = fmt.Errorf("no HTTP/2 SETTINGS from the server: %w", err).Error()
			}
			return r
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			continue
		}
		_ = sf.ForeachSetting(func(s http2.Setting) error {
			r.Settings = append(r.Settings, Setting{Name: settingName(s.ID), ID: uint16(s.ID), Value: s.Val})
			return nil
		})
		_ = fr.WriteSettingsAck()
		_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
		return r
	}
	r.Error = "no HTTP/2 SETTINGS among the server's first frames"
	return r
}

// settingName is the setting's RFC name without SETTINGS_, or UNKNOWN_0xNN.
func settingName(id http2.SettingID) string {
	s := id.String()
	if strings.HasPrefix(s, "UNKNOWN_SETTING_") {
		return "UNKNOWN_0x" + strconv.FormatUint(uint64(id), 16)
	}
	return s
}

// httpClient is the client the API requests go through: HTTP/2 over TLS when the server
// negotiated it, h2c when the server spoke it, HTTP/1.1 otherwise.
func httpClient(tc *tls.Config, h2, h2c bool, timeout time.Duration) *http.Client {
	var p http.Protocols
	switch {
	case h2:
		p.SetHTTP2(true)
	case h2c:
		p.SetUnencryptedHTTP2(true)
	default:
		p.SetHTTP1(true)
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		TLSClientConfig:     tc.Clone(),
		Protocols:           &p,
		ForceAttemptHTTP2:   h2,
		TLSHandshakeTimeout: timeout,
		DisableCompression:  true, // a stream's first token must not wait on a decompressor
	}}
}

// firstModel is the first model GET /v1/models lists, and the answer's Alt-Svc. When it cannot
// tell, the model is "sim" (the embedded default's) and guessed says why.
func firstModel(ctx context.Context, hc *http.Client, base, key string) (model, altSvc, guessed string) {
	model = "sim"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return model, "", "GET /v1/models: " + err.Error()
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return model, "", "GET /v1/models: " + err.Error()
	}
	defer resp.Body.Close()
	altSvc = resp.Header.Get("Alt-Svc")
	switch {
	case resp.StatusCode == http.StatusUnauthorized && key == "":
		return model, altSvc, "GET /v1/models answered 401: the server wants a key (--key or $LAYER0_API_KEY)"
	case resp.StatusCode != http.StatusOK:
		return model, altSvc, "GET /v1/models answered " + resp.Status
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&list); err != nil {
		return model, altSvc, "GET /v1/models: the answer is not a model list"
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return model, altSvc, "GET /v1/models lists no model"
	}
	return list.Data[0].ID, altSvc, ""
}

// dialHTTP3 reads the h3 entry of altSvc and, when there is one, tries a QUIC handshake with it.
func dialHTTP3(ctx context.Context, altSvc, ip string, tc *tls.Config, timeout time.Duration) *HTTP3 {
	r := &HTTP3{AltSvc: altSvc}
	port, ok := h3Port(altSvc)
	if !ok {
		return r
	}
	r.Advertised, r.Addr = true, net.JoinHostPort(ip, port)
	c := tc.Clone()
	c.NextProtos = []string{"h3"}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t0 := time.Now()
	qc, err := quic.DialAddr(ctx, r.Addr, c, &quic.Config{HandshakeIdleTimeout: timeout})
	r.Ms = ms(time.Since(t0))
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Connected, r.ALPN = true, qc.ConnectionState().TLS.NegotiatedProtocol
	_ = qc.CloseWithError(0, "")
	return r
}

// h3Port is the port of the h3 alternative in an Alt-Svc value (h3=":443"; ma=86400, …); an
// alternative on another host is not probed.
func h3Port(altSvc string) (string, bool) {
	for alt := range strings.SplitSeq(altSvc, ",") {
		proto, rest, ok := strings.Cut(strings.TrimSpace(alt), "=")
		if !ok || proto != "h3" {
			continue
		}
		v, _, _ := strings.Cut(rest, ";")
		v = strings.Trim(strings.TrimSpace(v), `"`)
		if h, p, err := net.SplitHostPort(v); err == nil && h == "" && p != "" {
			return p, true
		}
	}
	return "", false
}
