//go:build !race

package e2e

// admissionTimed says whether the admission benchmarks' latency bounds hold (see the race
// build's).
const admissionTimed = true
