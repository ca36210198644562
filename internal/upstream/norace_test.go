//go:build !race

package upstream

// raceEnabled reports a -race build; see race_test.go.
const raceEnabled = false
