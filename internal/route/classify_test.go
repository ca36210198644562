package route

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
)

func TestClassify(t *testing.T) {
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tests := []struct {
		name          string
		err           error
		wantReason    string
		wantRetryable bool
		wantFault     bool
	}{
		{"nil", nil, "", false, false},
		{"429", apierr.New(apierr.RateLimit, "rate limited"), ReasonRateLimit, true, false},
		{"529", apierr.New(apierr.Overloaded, "overloaded"), ReasonOverloaded, true, true},
		{"503 from an engine", apierr.From(apierr.New(apierr.KindForStatus(503), "busy")), ReasonOverloaded, true, true},
		{"502", apierr.New(apierr.BadGateway, "bad gateway"), ReasonServerError, true, true},
		{"500", apierr.New(apierr.API, "internal"), ReasonServerError, true, true},
		{"504", apierr.New(apierr.Timeout, "timed out"), ReasonTimeout, true, true},
		{"our 503", apierr.New(apierr.Unavailable, "no engine"), ReasonUnavailable, true, true},
		{"400", apierr.Invalid("temperature", "too high"), ReasonClientError, false, false},
		{"401 from an engine", apierr.New(apierr.Authentication, "bad key"), ReasonClientError, false, false},
		{"404", apierr.New(apierr.NotFound, "no such model"), ReasonClientError, false, false},
		{"413", apierr.New(apierr.RequestTooLarge, "too large"), ReasonClientError, false, false},
		{"CUDA OOM as a 500", apierr.New(apierr.API, "CUDA error: out of memory"), ReasonOOM, true, true},
		{"OOM as a 400", apierr.New(apierr.InvalidRequest, "OOM while allocating KV cache"), ReasonOOM, true, true},
		{"java-style OOM", errors.New("java.lang.OutOfMemoryError"), ReasonOOM, true, true},
		{"'room' is not OOM", apierr.New(apierr.InvalidRequest, "no room for tools"), ReasonClientError, false, false},
		{"OpenAI context code", &apierr.Error{Kind: apierr.InvalidRequest, Message: "too long", Code: "context_length_exceeded"},
			ReasonContextLength, true, false},
		{"vLLM context", apierr.New(apierr.InvalidRequest, "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens"),
			ReasonContextLength, true, false},
		{"Anthropic context", apierr.New(apierr.InvalidRequest, "prompt is too long: 210000 tokens > 200000 maximum"),
			ReasonContextLength, true, false},
		{"llama.cpp context", apierr.New(apierr.InvalidRequest, "the request exceeds the available context size"),
			ReasonContextLength, true, false},
		{"TGI context", apierr.New(apierr.InvalidRequest, "`inputs` must have less than 4096 tokens"),
			ReasonContextLength, true, false},
		{"deadline", context.DeadlineExceeded, ReasonTimeout, true, true},
		{"deadline through apierr.From", apierr.From(fmt.Errorf("engine: %w", context.DeadlineExceeded)), ReasonTimeout, true, true},
		{"canceled", context.Canceled, ReasonCanceled, false, false},
		{"canceled through apierr.From", apierr.From(context.Canceled), ReasonCanceled, false, false},
		{"connection refused", dialErr, ReasonNetwork, true, true},
		{"connection refused wrapped as 502", apierr.Wrap(apierr.BadGateway, dialErr, "engine unreachable"), ReasonNetwork, true, true},
		{"net timeout", &net.OpError{Op: "read", Err: timeoutErr{}}, ReasonTimeout, true, true},
		{"unexpected EOF", fmt.Errorf("reading stream: %w", io.ErrUnexpectedEOF), ReasonNetwork, true, true},
		{"unknown", errors.New("something odd"), ReasonServerError, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reason, retryable := Classify(tt.err)
			if reason != tt.wantReason || retryable != tt.wantRetryable {
				t.Errorf("got (%q, %v), want (%q, %v)", reason, retryable, tt.wantReason, tt.wantRetryable)
			}
			if got := Fault(reason); got != tt.wantFault {
				t.Errorf("Fault(%q): got %v, want %v", reason, got, tt.wantFault)
			}
		})
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestBudget(t *testing.T) {
	type op struct {
		advance  time.Duration
		requests int
		retries  int // attempted
		wantOK   int // granted
	}
	tests := []struct {
		name string
		cfg  BudgetConfig
		ops  []op
	}{
		{
			name: "the minimum allows retries on a quiet pool",
			cfg:  BudgetConfig{MinRetries: 2, Ratio: 0.1, Window: 10 * time.Second},
			ops:  []op{{retries: 5, wantOK: 2}},
		},
		{
			name: "a share of the requests",
			cfg:  BudgetConfig{MinRetries: 2, Ratio: 0.2, Window: 10 * time.Second},
			ops: []op{
				{requests: 50, retries: 20, wantOK: 12}, // 2 + 20% of 50
				{requests: 5, retries: 5, wantOK: 1},    // 2 + 20% of 55 = 13
			},
		},
		{
			name: "the window slides",
			cfg:  BudgetConfig{MinRetries: 1, Ratio: 0.5, Window: 10 * time.Second},
			ops: []op{
				{requests: 10, retries: 10, wantOK: 6},
				{advance: 5 * time.Second, retries: 1, wantOK: 0},
				{advance: 5 * time.Second, retries: 3, wantOK: 1}, // the first second's counts left
				{advance: 10 * time.Second, requests: 2, retries: 5, wantOK: 2},
			},
		},
		{
			name: "the configuration's defaults: 10 plus 20%",
			cfg:  withDefaults(Config{}).Budget,
			ops:  []op{{requests: 100, retries: 100, wantOK: 30}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			b := NewBudget(tt.cfg, clk.Now)
			for i, o := range tt.ops {
				clk.Advance(o.advance)
				for range o.requests {
					b.Request()
				}
				got := 0
				for range o.retries {
					if b.Retry() {
						got++
					}
				}
				if got != o.wantOK {
					t.Errorf("op %d: got %d retries granted, want %d", i, got, o.wantOK)
				}
			}
		})
	}
}

func TestBucketIndex(t *testing.T) {
	for _, s := range []int64{-21, -10, -1, 0, 9, 10, 1 << 40} {
		if i := bucketIndex(s); i < 0 || i >= windowBuckets || int64(i) != ((s%10)+10)%10 {
			t.Errorf("bucketIndex(%d): got %d", s, i)
		}
	}
}
