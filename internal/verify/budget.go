package verify

import (
	"context"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// A batch sizes an SMTP session by time, not by a count of addresses: the
// engine asks one more address only while the slowest reply the session
// has seen would still fit before its deadline, twice over, and leaves the
// rest unasked (Unasked) for another session.

type askUntilKey struct{}

// AskUntil returns a context under which the engine's SMTP sessions ask
// no address whose reply would likely arrive after t. Without it a
// session asks every address it is given.
func AskUntil(ctx context.Context, t time.Time) context.Context {
	if cur, ok := askUntil(ctx); ok && cur.Before(t) {
		return ctx
	}
	return context.WithValue(ctx, askUntilKey{}, t)
}

func askUntil(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(askUntilKey{}).(time.Time)
	return t, ok
}

// Unasked tells whether an SMTP check records an address a session left
// unasked because its time budget (AskUntil) would not hold the reply.
func Unasked(c evs.SMTPCheck) bool { return c.Detail == detailOutOfTime }

// fits tells whether one more RCPT fits before until when replies take up
// to reply each: twice the slowest reply, as a reply may be slower than
// any so far, and twice that again when an accepted answer would be
// followed by the accept-all probe.
func fits(until time.Time, reply time.Duration, probe bool) bool {
	need := 2 * reply
	if probe {
		need *= 2
	}
	return time.Until(until) >= need
}
