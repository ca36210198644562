package metrics

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestUtilization(t *testing.T) {
	tests := []struct {
		load Load
		want float64
	}{
		{Load{}, 0},
		{Load{KVCacheUsage: 0.42, Running: 7}, 0.42},
		{Load{KVCacheUsage: 0.1, Waiting: 1}, 1},
		{Load{KVCacheUsage: 1.3}, 1},
		{Load{KVCacheUsage: -0.2}, 0},
	}
	for _, tt := range tests {
		if got := tt.load.Utilization(); got != tt.want {
			t.Errorf("%+v: got %v, want %v", tt.load, got, tt.want)
		}
	}
}

func TestParseVLLM(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Load
		err  string
	}{
		{"vllm", `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 4.0
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.731
vllm:prompt_tokens_total{model_name="x"} 12345
`, Load{Running: 4, Waiting: 2, KVCacheUsage: 0.731}, ""},
		{"two models summed, usage the highest", `vllm:num_requests_running{model_name="a"} 1
vllm:num_requests_running{model_name="b"} 2
vllm:kv_cache_usage_perc{model_name="a"} 0.2
vllm:kv_cache_usage_perc{model_name="b"} 0.6
`, Load{Running: 3, KVCacheUsage: 0.6}, ""},
		{"old name, no labels, timestamps", "vllm:gpu_cache_usage_perc 0.5 1712345678000\nvllm:num_requests_waiting 0\n",
			Load{KVCacheUsage: 0.5}, ""},
		{"braces and quotes inside label values", `vllm:num_requests_running{model_name="we\"ird} name"} 3` + "\n",
			Load{Running: 3}, ""},
		{"no vllm gauges", "go_goroutines 12\n# HELP x\n", Load{}, "no vllm gauges"},
		{"bad value", "vllm:num_requests_running{} lots\n", Load{}, "bad value"},
		{"missing value", "vllm:num_requests_waiting\n", Load{}, "no value"},
		{"unterminated labels", `vllm:num_requests_waiting{model_name="x` + "\n", Load{}, "unterminated"},
		{"other metrics may be malformed", "weird{ 1\nvllm:num_requests_running 1\n", Load{Running: 1}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseVLLM(strings.NewReader(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %v, want an error with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestAppendParseVLLM(t *testing.T) {
	for _, l := range []Load{{}, {Running: 3, Waiting: 1, KVCacheUsage: 0.25}, {Running: 256, KVCacheUsage: 1}} {
		got, err := ParseVLLM(strings.NewReader(string(AppendVLLM(nil, `sim "quoted"`, l))))
		if err != nil {
			t.Fatal(err)
		}
		if got != l {
			t.Errorf("round trip: got %+v, want %+v", got, l)
		}
	}
}

func FuzzParseVLLM(f *testing.F) {
	f.Add([]byte("vllm:num_requests_running{model_name=\"a\"} 1\nvllm:kv_cache_usage_perc 0.5\n"))
	f.Add(AppendVLLM(nil, "m", Load{Running: 1, Waiting: 2, KVCacheUsage: 0.3}))
	f.Add([]byte("vllm:num_requests_waiting{a=\"}\\\"\"} NaN 12\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ParseVLLM(strings.NewReader(string(b)))
		if err != nil {
			return
		}
		if u := l.Utilization(); !(u >= 0 && u <= 1) && u == u {
			t.Fatalf("utilisation %v out of [0, 1] for %+v", u, l)
		}
		// What parses survives a round trip through the exporter.
		again, err := ParseVLLM(strings.NewReader(string(AppendVLLM(nil, "m", l))))
		if err != nil {
			t.Fatalf("re-parse of %+v: %v", l, err)
		}
		if again != l && l == l { // NaN values never compare equal
			t.Fatalf("round trip: got %+v, want %+v", again, l)
		}
	})
}

func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			w.Write(AppendVLLM(nil, "m", Load{Running: 2, KVCacheUsage: 0.9})) //nolint:errcheck
		case "/empty":
			w.Write([]byte("go_goroutines 3\n")) //nolint:errcheck
		case "/slow":
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	hc := srv.Client()
	l, err := Scrape(context.Background(), hc, srv.URL+"/metrics")
	if err != nil || l != (Load{Running: 2, KVCacheUsage: 0.9}) {
		t.Errorf("scrape: got %+v %v", l, err)
	}
	if _, err := Scrape(context.Background(), hc, srv.URL+"/nope"); err == nil || !strings.Contains(err.Error(), "status 404") {
		t.Errorf("404: got %v", err)
	}
	if _, err := Scrape(context.Background(), hc, srv.URL+"/empty"); !errors.Is(err, ErrNoVLLMMetrics) {
		t.Errorf("no gauges: got %v, want ErrNoVLLMMetrics", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := Scrape(ctx, hc, srv.URL+"/slow"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow: got %v, want a deadline error", err)
	}
}
