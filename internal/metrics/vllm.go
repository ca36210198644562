package metrics

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// The vLLM gauges layer0 reads and the sim exports. SGLang and TGI publish different names; an
// engine without these names is simply not scraped (metrics_path unset).
const (
	NameRunning = "vllm:num_requests_running"
	NameWaiting = "vllm:num_requests_waiting"
	NameKVUsage = "vllm:kv_cache_usage_perc"
	// nameGPUCacheUsage is the name vLLM used for NameKVUsage before v0.10.
	nameGPUCacheUsage = "vllm:gpu_cache_usage_perc"
)

// Load is an engine's load as its vLLM gauges report it.
type Load struct {
	// Running is the number of sequences generating.
	Running float64
	// Waiting is the number of requests queued for a slot.
	Waiting float64
	// KVCacheUsage is the share, 0 to 1, of the KV cache in use.
	KVCacheUsage float64
}

// Utilization is the load as one number from 0 to 1, compared with
// fallback_utilization_threshold: the KV cache usage, or 1 while any request waits — an engine
// that queues is saturated whatever its cache says.
func (l Load) Utilization() float64 {
	if l.Waiting > 0 {
		return 1
	}
	return min(max(l.KVCacheUsage, 0), 1)
}

// AppendVLLM appends l in the Prometheus text format under the vLLM names, labelled with
// model_name as vLLM does.
func AppendVLLM(b []byte, model string, l Load) []byte {
	gauge := func(name, help string, v float64) {
		b = append(b, "# HELP "...)
		b = append(b, name...)
		b = append(b, ' ')
		b = append(b, help...)
		b = append(b, "\n# TYPE "...)
		b = append(b, name...)
		b = append(b, " gauge\n"...)
		b = append(b, name...)
		b = append(b, `{model_name=`...)
		b = strconv.AppendQuote(b, model)
		b = append(b, "} "...)
		b = strconv.AppendFloat(b, v, 'g', -1, 64)
		b = append(b, '\n')
	}
	gauge(NameRunning, "Number of requests in model execution batches.", l.Running)
	gauge(NameWaiting, "Number of requests waiting to be processed.", l.Waiting)
	gauge(NameKVUsage, "KV-cache usage. 1 means 100 percent usage.", l.KVCacheUsage)
	return b
}

// ErrNoVLLMMetrics is returned by ParseVLLM for an exposition without any of the vLLM gauges.
var ErrNoVLLMMetrics = errors.New("metrics: no vllm gauges in the exposition")

// maxLine bounds one exposition line; Prometheus expositions of an engine are far below it.
const maxLine = 64 << 10

// ParseVLLM reads a Prometheus text exposition and returns the vLLM gauges in it: requests
// running and waiting summed over every series (one per model served), KV cache usage the
// highest. Other metrics, comments and timestamps are skipped. It fails on a malformed line of
// a vLLM gauge, and with ErrNoVLLMMetrics when none is present.
func ParseVLLM(r io.Reader) (Load, error) {
	var l Load
	found := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		name, rest, ok := splitName(b)
		var dst *float64
		sum := true
		switch string(name) {
		case NameRunning:
			dst = &l.Running
		case NameWaiting:
			dst = &l.Waiting
		case NameKVUsage, nameGPUCacheUsage:
			dst, sum = &l.KVCacheUsage, false
		default:
			continue
		}
		if !ok {
			return Load{}, fmt.Errorf("metrics: line %d: unterminated label set", line)
		}
		v, err := parseValue(rest)
		if err != nil {
			return Load{}, fmt.Errorf("metrics: line %d: %s: %w", line, name, err)
		}
		if sum {
			*dst += v
		} else {
			*dst = max(*dst, v)
		}
		found = true
	}
	if err := sc.Err(); err != nil {
		return Load{}, fmt.Errorf("metrics: read exposition: %w", err)
	}
	if !found {
		return Load{}, ErrNoVLLMMetrics
	}
	return l, nil
}

// splitName splits a sample line into its metric name and what follows its label set. ok is
// false when a label set is not closed.
func splitName(b []byte) (name, rest []byte, ok bool) {
	i := bytes.IndexAny(b, "{ \t")
	if i < 0 {
		return b, nil, true
	}
	name = b[:i]
	if b[i] != '{' {
		return name, b[i:], true
	}
	quoted := false
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case quoted && c == '\\':
			j++
		case c == '"':
			quoted = !quoted
		case !quoted && c == '}':
			return name, b[j+1:], true
		}
	}
	return name, nil, false
}

// parseValue reads the sample value, the first field after the label set (a timestamp may
// follow).
func parseValue(rest []byte) (float64, error) {
	f := bytes.Fields(rest)
	if len(f) == 0 {
		return 0, errors.New("no value")
	}
	v, err := strconv.ParseFloat(string(f[0]), 64)
	if err != nil {
		return 0, fmt.Errorf("bad value %q", f[0])
	}
	return v, nil
}

// maxExposition bounds the body Scrape reads.
const maxExposition = 8 << 20

// Scrape GETs url, a Prometheus endpoint, with hc and parses its vLLM gauges.
func Scrape(ctx context.Context, hc *http.Client, url string) (Load, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Load{}, fmt.Errorf("metrics: scrape: %w", err)
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := hc.Do(req)
	if err != nil {
		return Load{}, fmt.Errorf("metrics: scrape: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return Load{}, fmt.Errorf("metrics: scrape %s: status %d", url, resp.StatusCode)
	}
	l, err := ParseVLLM(io.LimitReader(resp.Body, maxExposition))
	if err != nil {
		return Load{}, fmt.Errorf("metrics: scrape %s: %w", url, err)
	}
	return l, nil
}
