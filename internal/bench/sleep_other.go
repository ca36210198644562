//go:build !linux

package bench

import "time"

// preciseSleep sleeps for d, or maxSleepStep if that is shorter, with the runtime's timers,
// whose precision is the platform's.
func preciseSleep(d time.Duration) { time.Sleep(min(d, maxSleepStep)) }
