package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram layout. Values below 2^subBits are counted exactly (one bucket per nanosecond); above,
// every power of two [2^e, 2^(e+1)) is split into 2^(subBits-1) equal buckets, so a bucket is at
// most 2^-(subBits-1) of its value wide and its midpoint is within 2^-subBits (0.39%) of any value
// in it. Values of 2^maxExp ns (about 19.5 hours) and more land in the last bucket; Max stays exact.
const (
	subBits    = 8
	subCount   = 1 << subBits // exact buckets, and the start of the log-linear part
	halfCount  = subCount / 2 // buckets per power of two above subCount
	maxExp     = 46
	numBuckets = subCount + (maxExp-subBits)*halfCount
)

// Histogram is a log-linear histogram of durations with nanosecond resolution and 0.4% precision
// in fixed memory (about 40 KiB), in the spirit of HdrHistogram. Record never allocates; two
// histograms merge by adding their counts. The zero value is an empty histogram ready to use. A
// Histogram is not safe for concurrent use.
type Histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    uint64 // nanoseconds; wraps only after 584 years of recorded time
	min    uint64
	max    uint64
}

// bucketOf returns the bucket index of v nanoseconds.
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(v) - 1 // v in [2^e, 2^(e+1)), e >= subBits
	if e >= maxExp {
		return numBuckets - 1
	}
	shift := e - (subBits - 1)
	sub := int(v>>shift) - halfCount // in [0, halfCount)
	return subCount + (e-subBits)*halfCount + sub
}

// bucketRange returns the smallest value of bucket i and its width.
func bucketRange(i int) (lo, width uint64) {
	if i < subCount {
		return uint64(i), 1
	}
	j := i - subCount
	e := j/halfCount + subBits
	sub := uint64(j%halfCount + halfCount)
	shift := e - (subBits - 1)
	return sub << shift, 1 << shift
}

// Record adds one duration. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := uint64(0)
	if d > 0 {
		v = uint64(d)
	}
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += v
}

// Merge adds every value recorded in o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// Reset empties the histogram.
func (h *Histogram) Reset() { *h = Histogram{} }

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Min is the smallest recorded value, exact; zero when empty.
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max is the largest recorded value, exact; zero when empty.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the exact mean of the recorded values; zero when empty.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / h.n)
}

// Quantile returns the value at quantile q in [0, 1]: the smallest recorded value v such that at
// least q of all values are at most v, to within the bucket precision (0.4%, exact below 256 ns).
// The answer is the bucket's midpoint clamped to the exact Min and Max, so Quantile(0) is Min and
// Quantile(1) is Max. It is zero when the histogram is empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q <= 0 {
		return time.Duration(h.min)
	}
	if q >= 1 {
		return time.Duration(h.max)
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank == 0 {
		rank = 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			if i == numBuckets-1 { // the overflow bucket: only its largest value is known
				return time.Duration(h.max)
			}
			lo, w := bucketRange(i)
			v := lo + (w-1)/2
			return time.Duration(min(max(v, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
