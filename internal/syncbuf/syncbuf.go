// Package syncbuf is a bytes.Buffer safe for one goroutine writing (a logger, an access log, a
// child process's output) while another reads it back: what tests use to read what layer0 wrote.
package syncbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer guarded by a mutex. The zero value is empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Lines returns what was written so far split into lines, without the last line's newline
// (one empty line when nothing was written).
func (s *Buffer) Lines() []string {
	return strings.Split(strings.TrimSuffix(s.String(), "\n"), "\n")
}
