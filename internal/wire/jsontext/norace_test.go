//go:build !race

package jsontext

// raceEnabled reports a -race build; see race_test.go.
const raceEnabled = false
