package bench

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/layer0ai/layer0/internal/llm"
)

// Outcome counts the requests of a run: Sent those sent; OK those that got a complete 200
// response in the format; Failed and Errors the others, by kind ("status_NNN", "transport",
// "timeout", "stream_error", "truncated", "protocol", "canceled"); ErrorSamples the first
// message seen per kind. Report and SharedPrefixReport share it (its fields sit at the top level
// of their JSON).
type Outcome struct {
	Sent         uint64            `json:"sent"`
	OK           uint64            `json:"ok"`
	Failed       uint64            `json:"failed"`
	Errors       map[string]uint64 `json:"errors,omitempty"`
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
}

// Err says why a run failed as a whole: no request was sent, or some failed (the most frequent
// kind of failure named, with its first message). It is nil when every request sent got its
// answer.
func (o Outcome) Err() error {
	if o.Sent == 0 {
		return fmt.Errorf("no request was sent")
	}
	if o.Failed == 0 {
		return nil
	}
	kinds := make([]string, 0, len(o.Errors))
	for k := range o.Errors {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, c string) int { return cmp.Or(cmp.Compare(o.Errors[c], o.Errors[a]), cmp.Compare(a, c)) })
	msg := fmt.Sprintf("%d of %d requests failed", o.Failed, o.Sent)
	if len(kinds) > 0 {
		msg += fmt.Sprintf(", most with %s", kinds[0])
		if sample := o.ErrorSamples[kinds[0]]; sample != "" {
			msg += ": " + sample
		}
	}
	return errors.New(msg)
}

// Report is the result of a run. Durations are in nanoseconds in JSON.
type Report struct {
	// URL, Format, Stream, HTTP and Mode describe the run: Mode is "open" (Rate req/s) or
	// "closed" (Connections workers).
	URL         string  `json:"url"`
	Format      string  `json:"format"`
	BinaryMode  string  `json:"binary_mode,omitempty"`
	Stream      bool    `json:"stream"`
	HTTP        string  `json:"http"`
	Client      string  `json:"client"`
	Mode        string  `json:"mode"`
	Rate        float64 `json:"rate,omitempty"`
	Connections int     `json:"connections,omitempty"`

	// Elapsed runs from the start to the last response's end.
	Elapsed time.Duration `json:"elapsed_ns"`
	Outcome
	// Late counts requests sent more than LateAfter behind schedule (the generator or its worker
	// pool could not keep up); Blocked those that found every open-loop worker busy.
	// PeakInFlight is the most requests that were in flight at once.
	PeakInFlight int64         `json:"peak_in_flight"`
	Late         uint64        `json:"late"`
	LateAfter    time.Duration `json:"late_after_ns"`
	Blocked      uint64        `json:"blocked"`

	// Throughput is OK per second of Elapsed; TokensPerSec likewise for tokens.
	Throughput   float64 `json:"throughput_rps"`
	TokensPerSec float64 `json:"tokens_per_sec"`
	// Tokens and Bytes are the output tokens (as the responses' usage counts them, or as token
	// events where a response reports no usage) and response body bytes of successful requests;
	// BytesPerToken is their ratio. TokenEvents counts SSE text deltas, binary token IDs and text
	// frames: what TTFT and ITL are timed on.
	Tokens        uint64  `json:"tokens"`
	TokenEvents   uint64  `json:"token_events"`
	Bytes         uint64  `json:"bytes"`
	BytesPerToken float64 `json:"bytes_per_token"`

	// Wire is what crossed the generator's sockets during the run, both directions.
	Wire Wire `json:"wire"`

	// Latency is scheduled send → complete response; TTFT scheduled send → first token (streams);
	// ITL the time between consecutive tokens; SendLag scheduled → actual send.
	Latency Percentiles `json:"latency"`
	TTFT    Percentiles `json:"ttft"`
	ITL     Percentiles `json:"itl"`
	SendLag Percentiles `json:"send_lag"`
}

// Wire is the bytes on the wire of a run: for HTTP/1.1 and HTTP/2 what the generator read from
// and wrote to its TCP connections (HTTP, and TLS records for https: the TCP payload), for
// HTTP/3 the payload of its UDP datagrams (QUIC packets: headers, encryption, acknowledgements).
// Neither counts IP, TCP or UDP headers. Connection setup (TCP has none of its own here; TLS and
// QUIC handshakes) is shared out over the run's requests, so short runs on new connections
// report more per request than a long run does.
type Wire struct {
	// Sent and Received are the run's totals.
	Sent     uint64 `json:"sent_bytes"`
	Received uint64 `json:"received_bytes"`
	// SentPerRequest and ReceivedPerRequest divide them by the requests sent.
	SentPerRequest     float64 `json:"sent_bytes_per_request"`
	ReceivedPerRequest float64 `json:"received_bytes_per_request"`
	// PerToken is both directions' bytes per output token of the successful requests.
	PerToken float64 `json:"bytes_per_token"`
}

// Percentiles summarises a histogram.
type Percentiles struct {
	Count uint64        `json:"count"`
	Min   time.Duration `json:"min_ns"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	P999  time.Duration `json:"p999_ns"`
	Max   time.Duration `json:"max_ns"`
}

// percentiles summarises h.
func percentiles(h *Histogram) Percentiles {
	return Percentiles{
		Count: h.Count(), Min: h.Min(), Mean: h.Mean(),
		P50: h.Quantile(0.5), P90: h.Quantile(0.9), P99: h.Quantile(0.99), P999: h.Quantile(0.999),
		Max: h.Max(),
	}
}

func (r *runner) report() *Report {
	s := r.snapshot()
	c := r.cfg
	rep := &Report{
		URL: c.URL, Format: c.Format.String(), Stream: c.Stream,
		HTTP: "1.1", Client: "layer0", Mode: "closed", Connections: c.Connections,
		Elapsed:      s.lastEnd,
		Outcome:      Outcome{Sent: r.started.Load(), OK: s.ok, Failed: s.failed()},
		PeakInFlight: r.peak.Load(),
		Late:         s.late, LateAfter: c.LateAfter, Blocked: r.blocked.Load(),
		Tokens: s.tokens, TokenEvents: s.events, Bytes: s.bytes,
		Latency: percentiles(&s.latency), TTFT: percentiles(&s.ttft), ITL: percentiles(&s.itl),
		SendLag: percentiles(&s.lag),
	}
	switch {
	case c.HTTP2:
		rep.HTTP = "2"
	case c.HTTP3:
		rep.HTTP = "3"
	}
	if c.Format == llm.FormatBinary {
		rep.BinaryMode = fmt.Sprintf("v%d", c.BinaryVersion)
		if c.BinaryText {
			rep.BinaryMode += "-text"
		}
	}
	switch {
	case c.HTTP3:
		rep.Client = "quic-go"
	case c.HTTP2 || c.NetHTTP || strings.HasPrefix(c.URL, "https:"):
		rep.Client = "net/http"
	}
	rep.Wire = Wire{Sent: r.wire.sent.Load(), Received: r.wire.received.Load()}
	if rep.Sent > 0 {
		rep.Wire.SentPerRequest = float64(rep.Wire.Sent) / float64(rep.Sent)
		rep.Wire.ReceivedPerRequest = float64(rep.Wire.Received) / float64(rep.Sent)
	}
	if s.tokens > 0 {
		rep.Wire.PerToken = float64(rep.Wire.Sent+rep.Wire.Received) / float64(s.tokens)
	}
	if c.Rate > 0 {
		rep.Mode, rep.Rate, rep.Connections = "open", c.Rate, 0
	}
	if rep.Elapsed > 0 {
		sec := rep.Elapsed.Seconds()
		rep.Throughput = float64(s.ok) / sec
		rep.TokensPerSec = float64(s.tokens) / sec
	}
	if s.tokens > 0 {
		rep.BytesPerToken = float64(s.bytes) / float64(s.tokens)
	}
	if rep.Failed > 0 {
		rep.Errors = map[string]uint64{}
		for k, n := range s.kinds {
			if n > 0 {
				rep.Errors[ErrorKind(k).String()] = n
			}
		}
		for st, n := range s.status {
			rep.Errors[statusKey(st)] = n
		}
		rep.ErrorSamples = s.samples
	}
	return rep
}

// WriteText writes the report for a person to read.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	mode := fmt.Sprintf("closed loop, %d connections", r.Connections)
	if r.Mode == "open" {
		mode = fmt.Sprintf("open loop at %g req/s", r.Rate)
	}
	kind := "JSON"
	switch {
	case r.Format == "binary":
		kind = r.BinaryMode + " frames"
	case r.Stream:
		kind = "SSE"
	}
	fmt.Fprintf(&b, "target      %s (%s %s, HTTP/%s, %s client)\n", r.URL, r.Format, kind, r.HTTP, r.Client)
	fmt.Fprintf(&b, "load        %s for %s\n", mode, FormatDuration(r.Elapsed))
	fmt.Fprintf(&b, "requests    %d sent, %d ok, %d failed, at most %d in flight; %d late (sent >%s behind schedule), %d found no idle worker\n",
		r.Sent, r.OK, r.Failed, r.PeakInFlight, r.Late, FormatDuration(r.LateAfter), r.Blocked)
	fmt.Fprintf(&b, "throughput  %.1f req/s, %.0f tokens/s; %d tokens, %d bytes, %.1f bytes/token\n",
		r.Throughput, r.TokensPerSec, r.Tokens, r.Bytes, r.BytesPerToken)
	if r.Wire.Sent+r.Wire.Received > 0 {
		fmt.Fprintf(&b, "wire        %d bytes sent, %d received: %.0f + %.0f per request, %.1f per token (%s)\n",
			r.Wire.Sent, r.Wire.Received, r.Wire.SentPerRequest, r.Wire.ReceivedPerRequest, r.Wire.PerToken, r.wireKind())
	}
	fmt.Fprintf(&b, "\n%-10s %9s %9s %9s %9s %9s %9s %9s %9s\n", "", "count", "min", "mean", "p50", "p90", "p99", "p99.9", "max")
	row := func(name string, p Percentiles) {
		if p.Count == 0 {
			return
		}
		fmt.Fprintf(&b, "%-10s %9d %9s %9s %9s %9s %9s %9s %9s\n", name, p.Count,
			FormatDuration(p.Min), FormatDuration(p.Mean), FormatDuration(p.P50), FormatDuration(p.P90), FormatDuration(p.P99), FormatDuration(p.P999), FormatDuration(p.Max))
	}
	row("latency", r.Latency)
	row("ttft", r.TTFT)
	row("itl", r.ITL)
	row("send lag", r.SendLag)
	if len(r.Errors) > 0 {
		b.WriteString("\nerrors\n")
		keys := make([]string, 0, len(r.Errors))
		for k := range r.Errors {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, c string) int {
			return cmp.Or(cmp.Compare(r.Errors[c], r.Errors[a]), cmp.Compare(a, c))
		})
		for _, k := range keys {
			fmt.Fprintf(&b, "  %-14s %d", k, r.Errors[k])
			if s := r.ErrorSamples[k]; s != "" {
				fmt.Fprintf(&b, "  (%s)", oneLine(s, 100))
			}
			b.WriteByte('\n')
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// wireKind says what the wire line counts.
func (r *Report) wireKind() string {
	switch {
	case r.HTTP == "3":
		return "UDP payload: QUIC packets"
	case strings.HasPrefix(r.URL, "https:"):
		return "TCP payload: TLS records"
	}
	return "TCP payload"
}

// FormatDuration prints a duration with three significant digits and a unit a person reads at
// a glance, chosen by its magnitude: a negative one (a difference) is printed as its positive
// counterpart with a minus sign.
func FormatDuration(d time.Duration) string {
	a := d
	if a < 0 {
		a = -a
	}
	switch {
	case a < time.Microsecond:
		return fmt.Sprintf("%dns", d)
	case a < time.Millisecond:
		return fmt.Sprintf("%.3gµs", float64(d)/1e3)
	case a < time.Second:
		return fmt.Sprintf("%.3gms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.3gs", d.Seconds())
}

// oneLine shortens s to at most n runes on one line.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// startProgress draws the progress bar until the returned function is called, which draws it a
// last time and ends the line.
func (r *runner) startProgress() (stop func()) {
	if r.cfg.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	go r.drawProgress(done, exited)
	return func() {
		close(done)
		<-exited
	}
}

// drawProgress is the progress bar's goroutine.
func (r *runner) drawProgress(done <-chan struct{}, exited chan<- struct{}) {
	defer close(exited)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			fmt.Fprintf(r.cfg.Progress, "\r%s\x1b[K\n", r.progressLine())
			return
		case <-t.C:
			fmt.Fprintf(r.cfg.Progress, "\r%s\x1b[K", r.progressLine())
		}
	}
}

// progressLine renders one line: a bar of the run's bound, counts and the latency so far.
func (r *runner) progressLine() string {
	const width = 24
	elapsed := r.since()
	frac := 0.0
	if r.cfg.Duration > 0 {
		frac = float64(elapsed) / float64(r.cfg.Duration)
	}
	if r.cfg.Requests > 0 {
		frac = max(frac, float64(r.finished.Load())/float64(r.cfg.Requests))
	}
	frac = min(max(frac, 0), 1)
	fill := int(frac * width)
	s := r.snapshot()
	return fmt.Sprintf("[%s%s] %3.0f%% %6.1fs  sent %d  done %d  errors %d  late %d  p50 %s  p99 %s",
		strings.Repeat("=", fill), strings.Repeat(" ", width-fill), frac*100, elapsed.Seconds(),
		r.started.Load(), r.finished.Load(), r.errors.Load(), s.late,
		FormatDuration(s.latency.Quantile(0.5)), FormatDuration(s.latency.Quantile(0.99)))
}
