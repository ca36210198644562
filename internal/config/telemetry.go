package config

import (
	"net/url"
	"strings"
	"time"
)

// OTLP protocols.
const (
	// OTLPHTTP exports OTLP/HTTP with protobuf bodies (POST {endpoint}/v1/traces).
	OTLPHTTP = "http"
	// OTLPGRPC exports OTLP over gRPC.
	OTLPGRPC = "grpc"
)

// Telemetry defaults, also documented on the fields and in docs/config.md.
const (
	DefaultServiceName = "layer0"
	DefaultSampleRatio = 0.1
	DefaultOTLPTimeout = 10 * time.Second
)

// Telemetry configures the OpenTelemetry traces: one span per request, a child per engine
// attempt, exported over OTLP. Off unless otlp.endpoint is set.
type Telemetry struct {
	// OTLP is where the spans are exported.
	OTLP OTLP `yaml:"otlp"`
	// SampleRatio is the share of requests traced, 0 to 1, when the client sent no sampled
	// traceparent (a client's sampling decision is followed). Default 0.1.
	SampleRatio *float64 `yaml:"sample_ratio"`
	// ServiceName is the service.name resource attribute. Default layer0.
	ServiceName string `yaml:"service_name"`
}

// OTLP is an OTLP trace exporter's endpoint.
type OTLP struct {
	// Endpoint is the collector's URL, http://host:port or https://host:port (for protocol
	// http, a path other than / replaces /v1/traces). "" turns tracing off (the default).
	Endpoint string `yaml:"endpoint"`
	// Protocol is http (OTLP/HTTP protobuf) or grpc. Default http.
	Protocol string `yaml:"protocol"`
	// Headers are sent with every export (an authorization token, a tenant). Their values are
	// secrets: never logged, and redacted where the configuration is shown.
	Headers map[string]Secret `yaml:"headers"`
	// Timeout bounds one export. Default 10s.
	Timeout time.Duration `yaml:"timeout"`
}

// Enabled reports whether spans are exported.
func (t *Telemetry) Enabled() bool { return t.OTLP.Endpoint != "" }

// Ratio is SampleRatio with its default.
func (t *Telemetry) Ratio() float64 {
	if t.SampleRatio == nil {
		return DefaultSampleRatio
	}
	return *t.SampleRatio
}

func (t *Telemetry) setDefaults() {
	setDefault(&t.ServiceName, DefaultServiceName)
	if t.SampleRatio == nil {
		r := DefaultSampleRatio
		t.SampleRatio = &r
	}
	setDefault(&t.OTLP.Protocol, OTLPHTTP)
	setDefault(&t.OTLP.Timeout, DefaultOTLPTimeout)
}

func (t *Telemetry) validate(errs *Errors) {
	if r := t.Ratio(); !(r >= 0 && r <= 1) {
		errs.add("telemetry.sample_ratio", "must be between 0 and 1, got %v", r)
	}
	o := &t.OTLP
	if o.Protocol != OTLPHTTP && o.Protocol != OTLPGRPC {
		errs.add("telemetry.otlp.protocol", "must be http or grpc, got %q", o.Protocol)
	}
	notNegative(errs, "telemetry.otlp.timeout", o.Timeout)
	for _, k := range sortedKeys(o.Headers) {
		// The name may be shown; the value never is.
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			errs.add("telemetry.otlp.headers", "%q is not a header name", k)
		}
		if strings.ContainsAny(string(o.Headers[k]), "\r\n") {
			errs.add("telemetry.otlp.headers."+k, "the value has a line break")
		}
	}
	if o.Endpoint == "" {
		if len(o.Headers) > 0 {
			errs.add("telemetry.otlp.headers", "set without telemetry.otlp.endpoint")
		}
		return
	}
	if unescapedAt(o.Endpoint) {
		errs.add("telemetry.otlp.endpoint", "must not carry credentials: put them in telemetry.otlp.headers")
		return
	}
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		errs.add("telemetry.otlp.endpoint", "must be http://host:port or https://host:port, got %q", RedactUserinfo(o.Endpoint))
		return
	}
	if u.User != nil {
		errs.add("telemetry.otlp.endpoint", "must not carry credentials: put them in telemetry.otlp.headers")
	}
	if o.Protocol == OTLPGRPC && u.Path != "" && u.Path != "/" {
		errs.add("telemetry.otlp.endpoint", "a gRPC endpoint has no path, got %q", u.Path)
	}
}

// Secret is a value that must not be shown: it formats as Redacted with every verb and
// marshals so (MarshalRedacted, /config), and only Reveal gives it out, to the one place that
// sends it.
type Secret string

// Reveal returns the secret itself.
func (s Secret) Reveal() string { return string(s) }

// String implements fmt.Stringer.
func (Secret) String() string { return Redacted }

// GoString implements fmt.GoStringer.
func (Secret) GoString() string { return Redacted }

// MarshalText keeps the secret out of JSON and YAML renderings of the configuration.
func (Secret) MarshalText() ([]byte, error) { return []byte(Redacted), nil }
