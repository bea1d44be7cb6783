package testkit

import (
	"fmt"
	"testing"
	"time"
)

// PollEvery is the interval at which Eventually asks its condition again.
const PollEvery = 10 * time.Millisecond

// Eventually waits for something a test cannot be told about by a channel
// (a row a server writes, a line a child process prints, a port that starts
// to listen): it calls cond at once and then every PollEvery until cond
// returns nil, and fails the test at the deadline with cond's last error,
// which should say what was awaited and what was seen instead. within only
// keeps a broken build from hanging the run; a passing test never waits it
// out. cond may itself fail the test (t.Fatal) on a state that can never
// turn into the awaited one.
func Eventually(tb testing.TB, within time.Duration, cond func() error) {
	tb.Helper()
	EventuallyEvery(tb, within, PollEvery, cond)
}

// EventuallyEvery is Eventually asking cond every interval, for a condition
// that costs a round trip (an HTTP call, a DynamoDB read) too dear to make
// every 10 ms.
func EventuallyEvery(tb testing.TB, within, every time.Duration, cond func() error) {
	tb.Helper()
	err := cond()
	if err == nil {
		return
	}
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-deadline.C:
			// One last look: the condition may have come true while the
			// last tick's call was under way.
			if err = cond(); err == nil {
				return
			}
			tb.Fatalf("gave up after %v: %v", within, err)
			return
		case <-tick.C:
			if err = cond(); err == nil {
				return
			}
		}
	}
}

// Until adapts a boolean condition to Eventually: the error, while cond is
// false, is the formatted message.
func Until(cond func() bool, format string, args ...any) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf(format, args...)
	}
}

// Receive returns the next value from ch, failing the test if none comes
// within (or ch is closed first); what names the awaited event.
func Receive[T any](tb testing.TB, ch <-chan T, within time.Duration, what string) T {
	tb.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	select {
	case v, ok := <-ch:
		if !ok {
			tb.Fatalf("%s: the channel closed first", what)
		}
		return v
	case <-deadline.C:
		tb.Fatalf("gave up after %v waiting for %s", within, what)
	}
	var zero T
	return zero
}
