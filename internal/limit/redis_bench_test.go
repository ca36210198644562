package limit

import (
	"context"
	"fmt"
	"github.com/layer0ai/layer0/internal/store"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/store/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkAdmitRelease measures one request's limiter work — Admit, Reserve, the rate-limit
// response headers, Settle, Release —
// on the in-memory store and on a local Redis, one request at a time, so the per-request latency
// is the round trips' (reported as p50-µs and p99-µs beside ns/op). The key has a requests-per-
// minute limit, then every limit, then every limit on the key and globally. admit-p50-µs is the part before the engine is called (Admit and
// Reserve), the latency a request sees added; the rest happens after its answer.
func BenchmarkAdmitRelease(b *testing.B) {
	srv := redistest.Start(b)
	client, err := store.Dial([]string{srv.URL()}, "", time.Second)
	if err != nil {
		b.Fatal(err)
	}
	red := newLimits(b, store.Config{Client: client, Timeout: time.Second})
	limits := map[string]Limits{
		"requests": {RequestsPerMinute: 1 << 40},
		"all": {RequestsPerMinute: 1 << 40, InputTokensPerMinute: 1 << 50, OutputTokensPerMinute: 1 << 50,
			Concurrent: 1 << 20},
	}
	for _, store := range []struct {
		name string
		st   Store
	}{{"memory", NewMemory()}, {"redis", red}} {
		for _, key := range []string{"requests", "all", "all+global"} {
			b.Run(store.name+"/"+key, func(b *testing.B) {
				c, name := Config{Keys: limits, Store: store.st}, key
				if key == "all+global" { // every limit on the key and on the server as a whole
					name, c.Global = "all", limits["all"]
				}
				l := New(c)
				ctx := context.Background()
				h := http.Header{}
				took := make([]time.Duration, 0, b.N)
				admit := make([]time.Duration, 0, b.N)
				if store.st == red {
					if err := client.ConfigResetStat(ctx).Err(); err != nil {
						b.Fatal(err)
					}
				}
				b.ResetTimer()
				for range b.N {
					start := time.Now()
					ls, err := l.Admit(ctx, name)
					if err != nil {
						b.Fatal(err)
					}
					if err := ls.Reserve(ctx, 100); err != nil {
						b.Fatal(err)
					}
					admit = append(admit, time.Since(start))
					ls.Header(h)
					if err := ls.Settle(90, 10); err != nil {
						b.Fatal(err)
					}
					if err := ls.Release(); err != nil {
						b.Fatal(err)
					}
					took = append(took, time.Since(start))
				}
				b.StopTimer()
				if store.st == red {
					// Redis's own time running the scripts, per request (INFO commandstats).
					usec, calls, err := scriptStats(ctx, client)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(usec)/float64(b.N), "redis-µs/op")
					b.ReportMetric(float64(calls)/float64(b.N), "scripts/op")
				}
				slices.Sort(took)
				slices.Sort(admit)
				b.ReportMetric(float64(admit[len(admit)/2].Nanoseconds())/1e3, "admit-p50-µs")
				b.ReportMetric(float64(took[len(took)/2].Nanoseconds())/1e3, "p50-µs")
				b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds())/1e3, "p99-µs")
			})
		}
	}
}

// scriptStats sums, from Redis's INFO commandstats, the calls of EVAL and EVALSHA and the
// microseconds Redis spent in them since the last CONFIG RESETSTAT.
func scriptStats(ctx context.Context, c redis.UniversalClient) (usec, calls int64, err error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("info commandstats: %w", err)
	}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_eval" && name != "cmdstat_evalsha") {
			continue
		}
		for f := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls += n
			case "usec":
				usec += n
			}
		}
	}
	return usec, calls, nil
}
