package testkit

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// LogBuffer is a bytes.Buffer that many goroutines may write to while another
// reads it, or waits for a line (Await). The zero value is ready to use.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
	// written, when someone waits, is closed by the next Write.
	written chan struct{}
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.written != nil {
		close(l.written)
		l.written = nil
	}
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Await waits until cond holds of everything written so far, asking it
// again at each write, and returns what it held of. It fails the test with
// what (the awaited text) and what was written when within passes first.
func (l *LogBuffer) Await(tb testing.TB, within time.Duration, what string, cond func(written string) bool) string {
	tb.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		s := l.b.String()
		if l.written == nil {
			l.written = make(chan struct{})
		}
		next := l.written
		l.mu.Unlock()
		if cond(s) {
			return s
		}
		select {
		case <-next:
		case <-deadline.C:
			tb.Fatalf("gave up after %v waiting for %s; written:\n%s", within, what, s)
			return s
		}
	}
}
