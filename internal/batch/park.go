package batch

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/politeness"
)

// Politeness across every worker invocation: a group that cannot start
// (provider paused, no session slot, RCPT budget spent) is parked in the
// store instead of circling through the queue. Parked work runs again when:
//
//   - a session of the provider ends: its worker queues the oldest due
//     entry (a chain: each session that ends starts the next);
//   - its wait is over: one "wake" message per key and due time releases
//     up to Sessions entries;
//   - the scheduled sweep finds it due, so nothing is stranded if a worker
//     died between a park and a release.

// Message kinds of politeness.
const (
	KindUnparked = "unparked" // released work, skipping addresses with results
	KindWake     = "wake"     // releases the due parked work of Message.Key
)

// Parking keeps the work that waits for a provider, per politeness key.
type Parking interface {
	// Park, TakeParked and NextParked keep the work that waits, oldest
	// not-before first; TakeParked hands each entry to one caller, and
	// again to another only if remove was not called for minutes.
	Park(ctx context.Context, key string, notBefore time.Time, body string) error
	TakeParked(ctx context.Context, key string, now time.Time) (body string, remove func(), ok bool, err error)
	NextParked(ctx context.Context, key string) (notBefore time.Time, ok bool, err error)
	// ClaimWake reports true, to one caller, when no wake of key at or
	// before at is pending.
	ClaimWake(ctx context.Context, key string, at, now time.Time) (bool, error)
	// ParkedKeys lists the keys that may have parked work.
	ParkedKeys(ctx context.Context) ([]string, error)
}

// Polite configures politeness across invocations (each prober still
// keeps its own per-host limit).
type Polite struct {
	Gate    *politeness.Gate // its State is shared by every invocation
	Parking Parking          // keeps the work that must wait
}

// unpark queues up to n due parked entries of key; a failure is logged and
// a wake relinkAfter later retries, since the next session end may never
// come. While key is paused it queues nothing (it would only park again)
// but makes sure a wake comes at the pause's end.
func (w *Worker) unpark(ctx context.Context, key string, n int) (sent int) {
	if until, _, err := w.Polite.Gate.State.PauseState(ctx, key); err == nil && until.After(w.now()) {
		if err := w.scheduleWake(ctx, key, until); err != nil {
			w.logger().Error("polite: could not schedule a wake", slog.String("key", key), slog.String("error", err.Error()))
		}
		return 0
	}
	for range n {
		body, remove, ok, err := w.Polite.Parking.TakeParked(ctx, key, w.now())
		if err != nil {
			w.logger().Error("polite: could not take parked work", slog.String("key", key), slog.String("error", err.Error()))
			w.relink(ctx, key)
			return sent
		}
		if !ok {
			return sent
		}
		var m Message
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			w.logger().Error("polite: parked work is unreadable; dropped (the sweep plans its batch again)", slog.String("key", key))
			remove()
			continue
		}
		m.Kind = KindUnparked
		if err := w.Queue.Send(ctx, []Message{m}, 0); err != nil {
			// Still parked: claimed by us for a while, then by the next
			// wake, sweep or session end.
			w.logger().Error("polite: could not queue parked work; it stays parked", slog.String("key", key), slog.String("error", err.Error()))
			w.relink(ctx, key)
			return sent
		}
		remove()
		sent++
	}
	return sent
}

// relinkAfter is how soon a wake retries a release that failed: past a
// transient fault, well before the sweep.
const relinkAfter = 5 * time.Second

// relink schedules the wake that retries a failed release of key.
func (w *Worker) relink(ctx context.Context, key string) {
	if err := w.scheduleWake(ctx, key, w.now().Add(relinkAfter)); err != nil {
		w.logger().Error("polite: could not schedule a wake; the sweep releases the parked work", slog.String("key", key), slog.String("error", err.Error()))
	}
}

// parking is the items of a message that wait for one key until one time.
type parking struct {
	key       string
	notBefore time.Time
	forSlot   bool
	items     []evs.Item
}

// addParking merges items into ps by key and not-before.
func addParking(ps []parking, key string, notBefore time.Time, forSlot bool, items []evs.Item) []parking {
	if len(items) == 0 {
		return ps
	}
	for i := range ps {
		if ps[i].key == key && ps[i].notBefore.Equal(notBefore) {
			ps[i].items = append(ps[i].items, items...)
			ps[i].forSlot = ps[i].forSlot || forSlot
			return ps
		}
	}
	return append(ps, parking{key: key, notBefore: notBefore, forSlot: forSlot, items: items})
}

// park stores the waiting items of message m and makes sure something
// starts them: a wake at their not-before, and for a wait on a slot a
// second look at the slots (a session that ended between our failed try
// and our park found nothing parked to start).
func (w *Worker) park(ctx context.Context, m Message, ps []parking) error {
	for _, p := range ps {
		ms := Pack(m.AccountID, m.BatchID, p.items, w.packSize())
		for i := range ms {
			ms[i].Attempt, ms[i].Waited, ms[i].CacheRead = m.Attempt, m.Waited, true // looked up before it was parked
			body, err := json.Marshal(ms[i])
			if err != nil {
				return err
			}
			if err := w.Polite.Parking.Park(ctx, p.key, p.notBefore, string(body)); err != nil {
				return err
			}
		}
		now := w.now()
		switch {
		case p.notBefore.After(now):
			if err := w.scheduleWake(ctx, p.key, p.notBefore); err != nil {
				return err
			}
		case !p.forSlot:
			// Due already: no session end is owed to it, so a wake at once.
			if err := w.scheduleWake(ctx, p.key, now); err != nil {
				return err
			}
		}
		if p.forSlot {
			sessions, _ := w.Polite.Gate.Limits.ForKey(p.key)
			release, ok, err := w.Polite.Gate.State.AcquireSlot(ctx, p.key, sessions, w.Polite.Gate.HoldFor())
			if err != nil {
				return err
			}
			if ok {
				release()
				w.unpark(ctx, p.key, 1)
			}
			// A crashed holder frees its slot only when its lease expires:
			// a wake then.
			if err := w.scheduleWake(ctx, p.key, now.Add(w.Polite.Gate.HoldFor())); err != nil {
				return err
			}
		}
	}
	return nil
}

// scheduleWake sends one wake message for key at at, unless one at or
// before at is pending.
func (w *Worker) scheduleWake(ctx context.Context, key string, at time.Time) error {
	now := w.now()
	if limit := now.Add(w.Queue.MaxDelay()); at.After(limit) {
		at = limit // the wake that comes looks again
	}
	mine, err := w.Polite.Parking.ClaimWake(ctx, key, at, now)
	if err != nil || !mine {
		return err
	}
	return w.Queue.Send(ctx, []Message{{Kind: KindWake, Key: key}}, w.delay(at.Sub(now)))
}

// wake handles a KindWake message: it releases up to Sessions due entries
// of its key (those that find a slot start the rest as they end), and
// schedules the next wake for what is still parked.
func (w *Worker) wake(ctx context.Context, m Message) error {
	if m.Key == "" {
		w.logger().Error("polite: unreadable wake message; dropped")
		return nil
	}
	if w.Polite == nil || w.Polite.Gate == nil || w.Polite.Gate.State == nil || w.Polite.Parking == nil {
		w.logger().Warn("polite: no politeness store configured; wake dropped")
		return nil
	}
	return w.release(ctx, m.Key)
}

// release starts the due parked work of key, up to its session limit,
// unless it is paused, and schedules a wake for the rest.
func (w *Worker) release(ctx context.Context, key string) error {
	until, _, err := w.Polite.Gate.State.PauseState(ctx, key)
	if err != nil {
		return err
	}
	if until.After(w.now()) {
		return w.scheduleWake(ctx, key, until)
	}
	sessions, _ := w.Polite.Gate.Limits.ForKey(key)
	w.unpark(ctx, key, sessions)
	next, ok, err := w.Polite.Parking.NextParked(ctx, key)
	if err != nil || !ok {
		return err
	}
	if next.After(w.now()) {
		return w.scheduleWake(ctx, key, next)
	}
	return nil
}

// sweepParked is the sweep's part: every key with parked work is released
// as a wake would, so that no entry waits on a wake or a session that
// never comes. It returns how many keys failed.
func (w *Worker) sweepParked(ctx context.Context) (failed int) {
	if w.Polite == nil || w.Polite.Gate == nil || w.Polite.Gate.State == nil || w.Polite.Parking == nil {
		return 0
	}
	keys, err := w.Polite.Parking.ParkedKeys(ctx)
	if err != nil {
		w.logger().Error("sweep: could not list parked work", slog.String("error", err.Error()))
		return 1
	}
	for _, k := range keys {
		if err := w.release(ctx, k); err != nil {
			failed++
			w.logger().Error("sweep: parked work not released", slog.String("key", k), slog.String("error", err.Error()))
		}
	}
	return failed
}
