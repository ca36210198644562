//go:build race

package bench

// raceEnabled: the race detector's instrumentation allocates, so allocation guards skip.
const raceEnabled = true
