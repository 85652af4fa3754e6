// Package syncbuf is a bytes.Buffer safe for concurrent writers and readers:
// tests capture logs and child-process output into it while they run.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent use. The zero value is ready.
type Buffer struct {
	mu struct {
		sync.Mutex
		b bytes.Buffer
	}
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.b.String()
}
