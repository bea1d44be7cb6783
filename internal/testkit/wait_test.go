package testkit_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
)

// fatalTB records the failure a helper reports instead of failing the
// test that checks the helper.
type fatalTB struct {
	testing.TB
	failed string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn, which fails through tb (fatalTB ends its goroutine), on a
// goroutine of its own, and returns the failure, if any.
func run(t *testing.T, fn func(tb testing.TB)) string {
	tb := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(tb)
	}()
	<-done
	return tb.failed
}

// TestEventuallyGivesUpAtItsDeadline: a condition that never holds is
// asked every PollEvery until the deadline, and the failure says what it
// last said; the bubble's clock shows the wait was the deadline's, no
// more.
func TestEventuallyGivesUpAtItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var calls int
		failed := run(t, func(tb testing.TB) {
			testkit.Eventually(tb, time.Minute, func() error {
				calls++
				return fmt.Errorf("still %d", calls)
			})
		})
		if waited := time.Since(start); waited != time.Minute {
			t.Errorf("gave up after %v, want the deadline, 1m0s", waited)
		}
		if want := int(time.Minute / testkit.PollEvery); calls < want {
			t.Errorf("asked %d times, want at least %d (every %v)", calls, want, testkit.PollEvery)
		}
		if !strings.Contains(failed, "gave up after 1m0s") || !strings.Contains(failed, fmt.Sprintf("still %d", calls)) {
			t.Errorf("failure %q does not give the deadline and the last answer (%d)", failed, calls)
		}
	})
}

// TestEventuallyReturnsAtTheEvent: once the condition holds, Eventually
// returns at the next tick, not at its deadline.
func TestEventuallyReturnsAtTheEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var ready atomic.Bool
		time.AfterFunc(35*time.Millisecond, func() { ready.Store(true) })
		if failed := run(t, func(tb testing.TB) {
			testkit.Eventually(tb, time.Hour, testkit.Until(ready.Load, "not ready"))
		}); failed != "" {
			t.Fatal(failed)
		}
		if waited := time.Since(start); waited != 40*time.Millisecond {
			t.Errorf("returned after %v, want the first tick after the event, 40ms", waited)
		}
	})
}

// TestReceive: the value sent, or a failure naming the event at the
// deadline, or when the channel closes.
func TestReceive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ch := make(chan int, 1)
		time.AfterFunc(time.Second, func() { ch <- 7 })
		var got int
		if failed := run(t, func(tb testing.TB) { got = testkit.Receive(tb, ch, time.Minute, "seven") }); failed != "" || got != 7 {
			t.Fatalf("got %d, failure %q", got, failed)
		}
		start := time.Now()
		failed := run(t, func(tb testing.TB) { testkit.Receive(tb, ch, time.Minute, "a second value") })
		if time.Since(start) != time.Minute || !strings.Contains(failed, "a second value") {
			t.Fatalf("after %v: %q", time.Since(start), failed)
		}
		close(ch)
		if failed := run(t, func(tb testing.TB) { testkit.Receive(tb, ch, time.Minute, "a value") }); !strings.Contains(failed, "closed") {
			t.Fatalf("closed channel: %q", failed)
		}
	})
}

// TestAwaitWakesAtTheWrite: LogBuffer.Await returns at the write that
// makes its condition true, and fails at its deadline with what was
// written when no such write comes.
func TestAwaitWakesAtTheWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b testkit.LogBuffer
		start := time.Now()
		time.AfterFunc(time.Second, func() { b.Write([]byte("starting\n")) })
		time.AfterFunc(3*time.Second, func() { b.Write([]byte("listening on 127.0.0.1:1\n")) })
		var got string
		if failed := run(t, func(tb testing.TB) {
			got = b.Await(tb, time.Minute, "the listening line", func(s string) bool { return strings.Contains(s, "listening") })
		}); failed != "" {
			t.Fatal(failed)
		}
		if waited := time.Since(start); waited != 3*time.Second || got != "starting\nlistening on 127.0.0.1:1\n" {
			t.Fatalf("after %v: %q", waited, got)
		}
		failed := run(t, func(tb testing.TB) {
			b.Await(tb, time.Minute, "a line that never comes", func(s string) bool { return strings.Contains(s, "never") })
		})
		if !strings.Contains(failed, "a line that never comes") || !strings.Contains(failed, "listening on") {
			t.Fatalf("failure %q", failed)
		}
	})
}
