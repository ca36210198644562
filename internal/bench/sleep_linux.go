package bench

import (
	"syscall"
	"time"
)

// The open-loop scheduler must send each request at its time to within microseconds, or the
// generator's own lateness shows up as server latency. Go's timers cannot: when every goroutine
// waits, the runtime sleeps in epoll_wait, whose timeout is whole milliseconds, so a 500µs timer
// fires after up to 1ms (measured: a median send lag of 490µs at 2,000 req/s). The scheduler
// therefore sleeps in nanosleep(2) after setting the timer slack of the thread it runs on to 1ns
// (the default 50µs slack would add up to 50µs), and wakes within microseconds. The slack stays
// lowered on the threads the scheduler ran on, which only makes their own timers more exact.

// PR_SET_TIMERSLACK from linux/prctl.h.
const prSetTimerSlack = 29

// preciseSleep sleeps for d, or maxSleepStep if that is shorter, so that the caller can check
// for a stop.
func preciseSleep(d time.Duration) {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
	ts := syscall.NsecToTimespec(int64(min(d, maxSleepStep)))
	_ = syscall.Nanosleep(&ts, nil)
}
