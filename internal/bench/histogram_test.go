package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// reference returns the value at quantile q of sorted, by the same rank rule as Quantile.
func reference(sorted []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func TestHistogramQuantilesMatchSortedReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name string
		gen  func() time.Duration
	}{
		{"small exact", func() time.Duration { return time.Duration(rng.IntN(256)) }},
		{"uniform µs", func() time.Duration { return time.Duration(rng.IntN(1_000_000)) }},
		{"log-uniform 1ns..100s", func() time.Duration {
			return time.Duration(math.Exp(rng.Float64() * math.Log(100e9)))
		}},
		{"long tail", func() time.Duration {
			return time.Duration(50e3 * math.Exp(rng.ExpFloat64()*2))
		}},
	}
	quantiles := []float64{0, 0.001, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 1}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			vals := make([]time.Duration, 20000)
			var sum time.Duration
			for i := range vals {
				vals[i] = tt.gen()
				sum += vals[i]
				h.Record(vals[i])
			}
			slices.Sort(vals)
			for _, q := range quantiles {
				got, want := h.Quantile(q), reference(vals, q)
				tol := want/256 + 1 // half a bucket: 2^-8 of the value
				if d := got - want; d > tol || d < -tol {
					t.Errorf("Quantile(%v): got %d, want %d ± %d", q, got, want, tol)
				}
			}
			if got, want := h.Count(), uint64(len(vals)); got != want {
				t.Errorf("Count: got %d, want %d", got, want)
			}
			if got, want := h.Min(), vals[0]; got != want {
				t.Errorf("Min: got %d, want %d", got, want)
			}
			if got, want := h.Max(), vals[len(vals)-1]; got != want {
				t.Errorf("Max: got %d, want %d", got, want)
			}
			if got, want := h.Mean(), sum/time.Duration(len(vals)); got != want {
				t.Errorf("Mean: got %d, want %d", got, want)
			}
		})
	}
}

func TestHistogramBuckets(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	prev := -1
	for _, v := range []uint64{0, 1, 255, 256, 258, 511, 512, 1 << 20, 1<<46 - 1} {
		i := bucketOf(v)
		if i <= prev {
			t.Errorf("bucketOf(%d) = %d: not above the previous value's bucket %d", v, i, prev)
		}
		prev = i
	}
	for range 100000 {
		v := rng.Uint64N(1 << 46)
		i := bucketOf(v)
		lo, w := bucketRange(i)
		if v < lo || v >= lo+w {
			t.Fatalf("value %d: bucket %d is [%d, %d)", v, i, lo, lo+w)
		}
		if v >= subCount && float64(w)/float64(v) > 1.0/128 {
			t.Fatalf("value %d: bucket width %d is more than 1/128 of it", v, w)
		}
	}
	for _, v := range []uint64{1 << 46, 1 << 60, math.MaxUint64} {
		if got, want := bucketOf(v), numBuckets-1; got != want {
			t.Errorf("bucketOf(%d): got %d, want the last bucket %d", v, got, want)
		}
	}
}

func TestHistogramEdges(t *testing.T) {
	var h Histogram
	if got := h.Quantile(0.5); got != 0 {
		t.Errorf("empty Quantile: got %v, want 0", got)
	}
	h.Record(-time.Second)
	if got := h.Max(); got != 0 {
		t.Errorf("negative recorded: got max %v, want 0", got)
	}
	h.Record(100 * time.Hour) // beyond the last bucket: quantiles clamp to the exact max
	if got, want := h.Quantile(1), 100*time.Hour; got != want {
		t.Errorf("Quantile(1): got %v, want %v", got, want)
	}
	if got, want := h.Quantile(0.99), 100*time.Hour; got != want {
		t.Errorf("Quantile(0.99) in the overflow bucket: got %v, want the max %v", got, want)
	}
	h.Reset()
	if got := h.Count(); got != 0 {
		t.Errorf("after Reset: got count %d, want 0", got)
	}
}

func TestHistogramMergeEqualsRecordingAll(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var a, b, all Histogram
	for i := range 5000 {
		v := time.Duration(rng.IntN(10_000_000))
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
		all.Record(v)
	}
	var empty Histogram
	a.Merge(&empty)
	a.Merge(&b)
	if a != all {
		t.Errorf("merge of two halves differs from recording everything: count %d vs %d, min %v vs %v, max %v vs %v",
			a.Count(), all.Count(), a.Min(), all.Min(), a.Max(), all.Max())
	}
	empty.Merge(&all)
	if empty != all {
		t.Error("merge into an empty histogram differs from the source")
	}
}

func TestHistogramRecordDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	h := new(Histogram)
	d := time.Duration(0)
	allocs := testing.AllocsPerRun(1000, func() {
		d += 12345
		h.Record(d)
	})
	if allocs != 0 {
		t.Errorf("Record: got %v allocs, want 0", allocs)
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	b.ReportAllocs()
	h := new(Histogram)
	d := time.Duration(1)
	for b.Loop() {
		d = d*1664525 + 1013904223
		h.Record(d & (1<<40 - 1))
	}
}

func BenchmarkHistogramQuantile(b *testing.B) {
	b.ReportAllocs()
	h := new(Histogram)
	for i := range 100000 {
		h.Record(time.Duration(i * 1000))
	}
	for b.Loop() {
		_ = h.Quantile(0.99)
	}
}
