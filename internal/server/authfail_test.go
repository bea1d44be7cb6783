package server

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/api"
)

// TestFailLimiterBounded: a flood of failing addresses never grows the
// limiter past its bound; the least recent are forgotten first, and a
// remembered address stays blocked.
func TestFailLimiterBounded(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	f := newFailLimiter(20, 100)
	for i := 0; i < 21; i++ {
		f.fail("192.0.2.1", now)
	}
	if _, blocked := f.blocked("192.0.2.1", now); !blocked {
		t.Fatal("21 failures in an instant are not blocked")
	}
	for i := 0; i < 99; i++ {
		f.fail(fmt.Sprintf("198.51.100.%d", i), now)
	}
	if _, blocked := f.blocked("192.0.2.1", now); !blocked || f.size() != 100 {
		t.Fatalf("at the bound: blocked=%v size=%d", blocked, f.size())
	}
	for i := 0; i < 100000; i++ {
		f.fail(fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255), now)
		if f.size() > 100 {
			t.Fatalf("size %d over the bound", f.size())
		}
	}
	if _, blocked := f.blocked("192.0.2.1", now); blocked {
		t.Fatal("the least recent address was not the one forgotten")
	}
	if wait, blocked := f.blocked("10.1.134.159", now); blocked || wait != 0 {
		t.Fatal("one failure blocks")
	}
}

// TestClientKey: failures are counted per IPv4 address and per IPv6 /64,
// whatever port or IPv4-mapped form the peer comes with.
func TestClientKey(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.7:5555":                    "192.0.2.7",
		"[::ffff:192.0.2.7]:5555":           "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:5555":       "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff:ffff:ffff:1]:1": "2001:db8:1:2::/64",
		"not an address":                    "invalid IP",
	} {
		if got := api.ClientPrefix(clientAddr(&http.Request{RemoteAddr: remote}, nil)); got != want {
			t.Errorf("ClientPrefix of %q = %q, want %q", remote, got, want)
		}
	}
}

// size is the number of clients remembered.
func (f *failLimiter) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.order.Len()
}
