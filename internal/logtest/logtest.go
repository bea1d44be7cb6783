// Package logtest gives tests a place to collect the output of a server or
// worker whose goroutines keep writing while the test reads.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that many goroutines may write to while another
// reads it. The zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
