//go:build !race

package passthrough

// raceEnabled reports a -race build; see race_test.go.
const raceEnabled = false
