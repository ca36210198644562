//go:build race

package tokenizer

// raceEnabled reports a -race build, where instrumented code runs at different relative speeds
// and timing comparisons mean nothing.
const raceEnabled = true
