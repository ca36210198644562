//go:build unix

package server

import "syscall"

// fdReserve is how many file descriptors are kept beside the client connections: engine
// connections, the config and certificate files, the logs.
const fdReserve = 512

// fdBudget is how many client connections fit in the process's file descriptor limit (Go raises
// the soft limit to the hard one at start); 0 when the limit cannot be read.
func fdBudget() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<30 {
		return 0
	}
	return max(int(r.Cur)-fdReserve, int(r.Cur)/2)
}
