package bench

import (
	"testing"
	"time"
)

func TestFormatDurationUnitByMagnitude(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0ns"},
		{999 * time.Nanosecond, "999ns"},
		{1500 * time.Nanosecond, "1.5µs"},
		{12345 * time.Microsecond, "12.3ms"},
		{2500 * time.Millisecond, "2.5s"},
		{-1500 * time.Nanosecond, "-1.5µs"},
		{-12345 * time.Microsecond, "-12.3ms"},
		{-90 * time.Second, "-90s"},
	}
	for _, tt := range tests {
		if got := FormatDuration(tt.d); got != tt.want {
			t.Errorf("FormatDuration(%d) = %q, want %q", int64(tt.d), got, tt.want)
		}
	}
}
