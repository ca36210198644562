package accesslog

import (
	"fmt"
	"os"
	"sync"
)

// File is an access log file that can be reopened by path, for logrotate: rotation renames the
// file, then signals the process (layer0 reopens on SIGUSR1), and the records after Reopen go
// to a new file at the path. Safe for concurrent use.
type File struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

// OpenFile opens (creating it, mode 0640) the file at path for appending.
func OpenFile(path string) (*File, error) {
	f, err := openAppend(path)
	if err != nil {
		return nil, err
	}
	return &File{path: path, f: f}, nil
}

func openAppend(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("access log: %w", err)
	}
	return f, nil
}

// Path is the file's path.
func (f *File) Path() string { return f.path }

// Write appends p to the file open now.
func (f *File) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.f.Write(p)
}

// Reopen opens the path again and closes the file written until now. When the path cannot be
// opened the old file is kept (and written to) and the error returned.
func (f *File) Reopen() error {
	nf, err := openAppend(f.path)
	if err != nil {
		return err
	}
	f.mu.Lock()
	old := f.f
	f.f = nf
	f.mu.Unlock()
	if err := old.Close(); err != nil {
		return fmt.Errorf("access log: closing the previous file: %w", err)
	}
	return nil
}

// Close closes the file.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.f.Close()
}
