//go:build !race

package tokenizer

// raceEnabled reports a -race build; see race_test.go.
const raceEnabled = false
