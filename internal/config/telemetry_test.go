package config

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestTelemetryDefaults(t *testing.T) {
	d := Default().Telemetry
	if d.Enabled() || d.ServiceName != "layer0" || d.Ratio() != 0.1 || d.OTLP.Protocol != OTLPHTTP || d.OTLP.Timeout != 10*time.Second {
		t.Errorf("defaults: %+v, want off, layer0, 0.1, http, 10s", d)
	}
	c, err := Parse([]byte(`
telemetry:
  service_name: edge
  sample_ratio: 0
  otlp: {endpoint: "https://otel.example:4318", protocol: grpc, timeout: 2s, headers: {Authorization: "Bearer s3cret"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	tc := c.Telemetry
	if !tc.Enabled() || tc.ServiceName != "edge" || tc.Ratio() != 0 || tc.OTLP.Protocol != OTLPGRPC || tc.OTLP.Timeout != 2*time.Second ||
		tc.OTLP.Headers["Authorization"].Reveal() != "Bearer s3cret" {
		t.Errorf("parsed: %+v", tc)
	}
	// The header's value never shows: not formatted, not marshalled.
	b, _ := json.Marshal(tc)
	y, err := c.MarshalRedacted()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(y), "Authorization: "+Redacted) {
		t.Errorf("the running configuration's header: %s, want it %s", y, Redacted)
	}
	for _, s := range []string{fmt.Sprintf("%v %+v %#v %s", tc, tc, tc, tc.OTLP.Headers), string(b), string(y)} {
		if strings.Contains(s, "s3cret") {
			t.Errorf("the header's secret shows: %s", s)
		}
	}
}

func TestTelemetryInvalid(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"telemetry: {sample_ratio: 1.5}", "telemetry.sample_ratio: must be between 0 and 1"},
		{"telemetry: {sample_ratio: -0.1}", "telemetry.sample_ratio: must be between 0 and 1"},
		{"telemetry: {otlp: {endpoint: 'http://c:4318', protocol: thrift}}", "telemetry.otlp.protocol: must be http or grpc"},
		{"telemetry: {otlp: {endpoint: 'c:4318'}}", "telemetry.otlp.endpoint: must be http://host:port"},
		{"telemetry: {otlp: {endpoint: 'http://u:s3cret@c:4318'}}", "telemetry.otlp.endpoint: must not carry credentials"},
		{"telemetry: {otlp: {endpoint: 'http://c:4317/v1', protocol: grpc}}", "telemetry.otlp.endpoint: a gRPC endpoint has no path"},
		{"telemetry: {otlp: {endpoint: 'http://c:4318', timeout: -1s}}", "telemetry.otlp.timeout: must not be negative"},
		{"telemetry: {otlp: {headers: {Authorization: s3cret}}}", "telemetry.otlp.headers: set without telemetry.otlp.endpoint"},
		{"telemetry: {otlp: {endpoint: 'http://c:4318', headers: {'bad name': s3cret}}}", `telemetry.otlp.headers: "bad name" is not a header name`},
		{"telemetry: {otlp: {endpoint: 'http://c:4318', sample: 1}}", "sample"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.yaml, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error shows the secret: %v", tc.yaml, err)
		}
	}
}
