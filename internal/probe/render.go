package probe

import (
	"fmt"
	"strings"
	"time"
)

// Lines renders r for a person: one line per finding, the step first.
func (r *Report) Lines() []string {
	var out lines
	out.add("probe", "%s", r.URL)
	if d := r.DNS; d != nil {
		switch {
		case d.Error != "":
			out.add("dns", "%s: %s (%.3fms)", d.Host, d.Error, d.Ms)
		case d.Literal:
			out.add("dns", "%s (an address: nothing to resolve)", d.Host)
		default:
			out.add("dns", "%s → %s in %.3fms", d.Host, strings.Join(d.Addrs, ", "), d.Ms)
		}
	}
	if t := r.TCP; t != nil {
		if t.Error != "" {
			out.add("tcp", "%s: %s (%.3fms)", t.Addr, t.Error, t.Ms)
		} else {
			out.add("tcp", "%s connected in %.3fms", t.Addr, t.Ms)
		}
	}
	if t := r.TLS; t != nil {
		t.lines(&out)
	}
	if t := r.TLS; t != nil && t.Error == "" && r.HTTP2 == nil {
		out.add("http2", "not negotiated: the server chose %q", t.ALPN)
	}
	if h := r.HTTP2; h != nil {
		if h.Error != "" {
			out.add("http2", "%s: %s", h.Over, h.Error)
		} else {
			out.add("http2", "SETTINGS over %s (%.3fms):", h.Over, h.Ms)
			for _, s := range h.Settings {
				out.add("", "  %-24s %d", s.Name, s.Value)
			}
		}
	}
	if h := r.HTTP3; h != nil {
		switch {
		case !h.Advertised && h.AltSvc == "":
			out.add("http3", "not advertised (no Alt-Svc)")
		case !h.Advertised:
			out.add("http3", "not advertised (Alt-Svc: %s)", h.AltSvc)
		case h.Error != "":
			out.add("http3", "advertised (Alt-Svc: %s); QUIC handshake with %s failed after %.3fms: %s", h.AltSvc, h.Addr, h.Ms, h.Error)
		default:
			out.add("http3", "advertised (Alt-Svc: %s); QUIC handshake with %s in %.3fms, ALPN %s", h.AltSvc, h.Addr, h.Ms, h.ALPN)
		}
	}
	if r.Model != "" && r.ModelGuessed != "" {
		out.add("model", "%s, a guess: %s", r.Model, r.ModelGuessed)
	} else if r.Model != "" {
		out.add("model", "%s", r.Model)
	}
	for i := range r.APIs {
		r.APIs[i].lines(&out)
	}
	return out
}

// lines collects a report's lines, each its step's name in a column of ten, then the text.
type lines []string

// add appends the line of step, its text formatted from format and args.
func (l *lines) add(step, format string, args ...any) {
	*l = append(*l, fmt.Sprintf("%-10s", step)+fmt.Sprintf(format, args...))
}

// lines adds the handshake's lines to out: the failure, or the version and cipher suite, the
// protocols offered and negotiated, and the certificate.
func (t *TLS) lines(out *lines) {
	if t.Error != "" {
		out.add("tls", "handshake failed after %.3fms: %s", t.Ms, t.Error)
		return
	}
	alpn := t.ALPN
	if alpn == "" {
		alpn = "none"
	}
	out.add("tls", "%s, %s, in %.3fms", t.Version, t.CipherSuite, t.Ms)
	out.add("alpn", "offered %s → negotiated %s", strings.Join(t.ALPNOffered, ", "), alpn)
	verified := "verified"
	if !t.Verified {
		verified = "not verified (--insecure)"
	}
	left := ""
	if na, err := time.Parse(time.RFC3339, t.NotAfter); err == nil {
		left = " (in " + time.Until(na).Round(time.Minute).String() + ")"
	}
	out.add("cert", "%s, names %s, issuer %s, expires %s%s, %s", t.Subject, strings.Join(t.Names, " "),
		t.Issuer, t.NotAfter, left, verified)
}

// lines adds the exchange's lines to out: the API's absence, failure, or times and sizes, then
// the answer's request id, processing time and server headers.
func (x *Exchange) lines(out *lines) {
	switch {
	case !x.Present && x.Status != 0:
		out.add(x.API, "absent (%s answered %d)", x.Path, x.Status)
	case !x.Present:
		out.add(x.API, "absent: %s", x.Error)
	case x.Error != "":
		out.add(x.API, "POST %s %s: %s", x.Path, x.Proto, x.Error)
	default:
		out.add(x.API, "POST %s %d %s: first byte %.3fms, first token %.3fms, end %.3fms", x.Path, x.Status, x.Proto,
			x.TTFBMs, x.FirstTokenMs, x.EndMs)
		out.add("", "%d tokens, %d bytes (%.1f bytes/token)", x.Tokens, x.Bytes, x.BytesPerToken)
	}
	if x.Present {
		var hs []string
		id := "X-Request-Id"
		if x.Headers[id] == "" && x.Headers["Request-Id"] != "" {
			id = "Request-Id" // the Anthropic API's name for it
		}
		for _, h := range []string{id, "X-Processing-Time", "Server"} {
			v := x.Headers[h]
			if v == "" {
				v = "-"
			}
			hs = append(hs, h+": "+v)
		}
		out.add("", "%s", strings.Join(hs, ", "))
	}
}

// Failure says why the probe found no working endpoint: the connection step that failed, or
// that no API request succeeded; "" when at least one did.
func (r *Report) Failure() string {
	switch {
	case r.DNS != nil && r.DNS.Error != "":
		return "resolving " + r.DNS.Host + ": " + r.DNS.Error
	case r.TCP != nil && r.TCP.Error != "":
		return "connecting to " + r.TCP.Addr + ": " + r.TCP.Error
	case r.TLS != nil && r.TLS.Error != "":
		return "TLS handshake: " + r.TLS.Error
	}
	for _, x := range r.APIs {
		if x.Present && x.Error == "" {
			return ""
		}
	}
	return "no API request succeeded"
}
