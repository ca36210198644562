//go:build unix

package cache_test

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/cache"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/tokenizer"
)

// request2k is a conversation of about 2,000 tokens: a system prompt and six turns.
func request2k(tb testing.TB) *llm.Request {
	para := "The quick brown fox jumps over the lazy dog while the committee reviews the quarterly report, " +
		"noting that revenue grew by 12% and that the new caching layer reduced latency considerably. "
	zero := 0.0
	r := &llm.Request{Model: "m", MaxTokens: 1024, Temperature: &zero,
		System: []llm.Block{{Type: llm.BlockText, Text: strings.Repeat(para, 8)}}}
	for i := 0; i < 6; i++ {
		r.Messages = append(r.Messages, llm.Message{Role: llm.Role(i % 2),
			Content: []llm.Block{{Type: llm.BlockText, Text: strings.Repeat(para, 8)}}})
	}
	if n := tokenizer.Default().CountRequest(r); n < 1900 || n > 2300 {
		tb.Fatalf("the request is %d tokens, want about 2000", n)
	}
	return r
}

func BenchmarkKey2kTokens(b *testing.B) {
	r := request2k(b)
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		cache.KeyOf("", "m", r)
	}
}

// reportCPU reports the process's CPU time per operation (user and system) beside the wall
// time: on a machine shared with other work the wall time counts the waits for a core, the CPU
// time only the work. Call it as defer reportCPU(b)() before the loop.
func reportCPU(b *testing.B) func() {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	start := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return func() {
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		used := time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) - start
		b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}
