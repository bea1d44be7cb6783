package replylog

import "testing"

// ForceHash makes the logs opened during t hash every scope with h (a
// constant h makes every scope collide).
func ForceHash(t *testing.T, h func(string) uint64) {
	testHash = h
	t.Cleanup(func() { testHash = nil })
}

// BreakActive closes the file of l's active segment under it, so the next
// write fails.
func BreakActive(l *Log) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active.f.Close()
}

// ForceSync makes the logs opened during t sync with kind ("io_uring",
// "aio" or "fdatasync" on Linux), or fall back from it as they would.
func ForceSync(t *testing.T, kind string) {
	forceSync = kind
	t.Cleanup(func() { forceSync = "" })
}
