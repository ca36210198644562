//go:build !unix

package server

// fdBudget is 0 where the file descriptor limit is not read: the configured cap applies as is.
func fdBudget() int { return 0 }
