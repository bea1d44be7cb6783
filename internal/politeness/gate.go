package politeness

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// State stores, atomically for its deployment, what the rules need per
// key: the session slots in use, the RCPT commands spent, a provider's
// pause. The rules are Gate's.
type State interface {
	// AcquireSlot takes one of key's slots session slots if one is free;
	// one never released expires after ttl (a holder that died).
	AcquireSlot(ctx context.Context, key string, slots int, ttl time.Duration) (release func(), ok bool, err error)
	// ReserveRcpts reserves RCPT commands of key so that no window of
	// length window holds more than limit: most if they fit, else what is
	// left if that is least or more. got is how many (0: none); next is
	// when most will fit, once the ones reserved are spent.
	ReserveRcpts(ctx context.Context, key string, least, most, limit int, window time.Duration, now time.Time) (got int, next time.Time, err error)
	// PauseState returns until when key is paused (the zero time: never)
	// and how many pauses in a row it had.
	PauseState(ctx context.Context, key string) (until time.Time, level int, err error)
	// Pause pauses key at now for length(pauses in a row so far), unless a
	// pause is in force at now, which it returns: sessions that ran side
	// by side meet the same refusal and must not stack their back-offs.
	Pause(ctx context.Context, key string, now time.Time, length func(level int) time.Duration) (until time.Time, err error)
	// ClearPause ends key's run of pauses unless a pause is in force at now.
	ClearPause(ctx context.Context, key string, now time.Time) error
}

// Gate admits SMTP sessions: one of a key opens only when its provider is
// not paused, a session slot is free and its RCPT commands fit the budget.
// It is safe for concurrent use; its fields must not change once in use.
type Gate struct {
	State  State       // nil: this process's memory
	MX     PreferredMX // finds a domain's provider (nil: the domain is the host)
	Limits Limits
	Egress string // the address sessions leave from (proxy host or "direct")
	// Exits, when set, names the SOCKS exits a host's sessions may leave
	// from, preferred first: each has limits of its own, so a provider's
	// batches spread over them (AdmitAny).
	Exits   func(host string) []string
	Window  time.Duration // the RCPT budget's window (default 1 min)
	SlotTTL time.Duration // how long a crashed holder keeps a slot (default 6 min)
	// PauseBase (default 1 min) is the pause after a throttling reply,
	// doubling with each in a row up to PauseMax (default 15 min, the
	// longest SQS delay).
	PauseBase, PauseMax time.Duration
	Now                 func() time.Time // default time.Now

	once sync.Once
	mem  *memory
}

// Ticket answers a request for a session of Key.
type Ticket struct {
	Key string
	// OK: the session may open now, and send Rcpts RCPT commands; Done
	// must be called when it ends. Fewer than asked for is what was left
	// of the budget, and Retry is when asking for more may pass.
	OK    bool
	Rcpts int
	// Else Retry is when asking again may pass: ForSlot marks a wait for
	// a slot (Retry is now: a session of the key that ends frees one),
	// Paused a provider that throttled us.
	Retry           time.Time
	ForSlot, Paused bool

	done func(ctx context.Context, throttled bool) (time.Time, error)
}

// Done ends an admitted ticket's session. throttled pauses the provider for
// every session and returns the pause's end; a clean session ends the run
// of pauses. A pause that could not be stored still returns PauseBase's end.
func (t Ticket) Done(ctx context.Context, throttled bool) (pausedUntil time.Time, err error) {
	if t.done == nil {
		return time.Time{}, nil
	}
	return t.done(ctx, throttled)
}

func (g *Gate) now() time.Time { return evs.Now(g.Now) }

// Until is the wait on the gate's clock from now to t (0 for the zero time
// or the past), whatever clock its callers keep.
func (g *Gate) Until(t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return max(t.Sub(g.now()), 0)
}

// RcptWindow is Window or its default.
func (g *Gate) RcptWindow() time.Duration { return cmp.Or(max(g.Window, 0), time.Minute) }

// HoldFor is SlotTTL or its default.
func (g *Gate) HoldFor() time.Duration { return cmp.Or(max(g.SlotTTL, 0), 6*time.Minute) }

// FirstPause is PauseBase or its default (a nil Gate's too: a worker
// that runs without one still waits that long after a throttling reply).
func (g *Gate) FirstPause() time.Duration {
	if g == nil {
		g = &Gate{}
	}
	return min(cmp.Or(max(g.PauseBase, 0), time.Minute), cmp.Or(max(g.PauseMax, 0), 15*time.Minute))
}

// state returns the State, making the memory one on first use.
func (g *Gate) state() State {
	if g.State != nil {
		return g.State
	}
	g.once.Do(func() { g.mem = &memory{now: g.now, keys: map[string]*memKey{}} })
	return g.mem
}

// Key is the key of a domain's sessions: the provider of its preferred
// MX host (of the domain when there is none) and Egress.
func (g *Gate) Key(ctx context.Context, domain string) string {
	host, _ := g.MailHost(ctx, domain)
	return g.HostKey(host)
}

// MailHost is the preferred MX host of domain (the domain itself without
// MX), and false (with the domain) when it has none that could be found.
func (g *Gate) MailHost(ctx context.Context, domain string) (string, bool) {
	if g.MX == nil {
		return domain, true
	}
	if h, ok := g.MX.PreferredMX(ctx, domain); ok {
		return h, true
	}
	return domain, false
}

// Budget returns the provider of a domain's sessions and the RCPT
// commands a minute it takes from us through all the exits it may leave
// from: the most addresses a minute its part of a batch can go. A domain
// whose MX host is not found has none ("", 0): its addresses need no RCPT.
func (g *Gate) Budget(ctx context.Context, domain string) (provider string, rcptPerMin int) {
	host, ok := g.MailHost(ctx, domain)
	if !ok {
		return "", 0
	}
	keys := g.HostKeys(host)
	_, per := g.Limits.ForKey(keys[0])
	return keys[0][:max(strings.LastIndex(keys[0], "|"), 0)], per * len(keys)
}

// HostKey is the key of sessions to MX host host through its preferred
// exit.
func (g *Gate) HostKey(host string) string { return g.HostKeys(host)[0] }

// HostKeys are the keys of sessions to MX host host, one per exit it may
// leave from, its preferred first.
func (g *Gate) HostKeys(host string) []string {
	var egresses []string
	if g.Exits != nil {
		egresses = g.Exits(host)
	}
	if len(egresses) == 0 {
		egresses = []string{g.Egress}
	}
	keys := make([]string, len(egresses))
	for i, e := range egresses {
		keys[i] = Key(host, e)
	}
	return keys
}

// leastRcpts is the smallest reservation worth a session: one address
// and the accept-all probe.
const leastRcpts = 2

// Admit asks, without waiting, for a session of key that sends at most
// rcpts RCPT commands, and at least what one address needs: a window's
// budget at most, and what is left of it when that is less (a group
// runs the part it covers now, and the rest at Retry).
func (g *Gate) Admit(ctx context.Context, key string, rcpts int) (Ticket, error) {
	st := g.state()
	sessions, limit := g.Limits.ForKey(key)
	now := g.now()
	until, level, err := st.PauseState(ctx, key)
	if err != nil {
		return Ticket{}, fmt.Errorf("politeness: read the pause of %s: %w", key, err)
	}
	if until.After(now) {
		return Ticket{Key: key, Retry: until, Paused: true}, nil
	}
	release, ok, err := st.AcquireSlot(ctx, key, sessions, g.HoldFor())
	if err != nil || !ok {
		return Ticket{Key: key, Retry: now, ForSlot: true}, wrap(err, "take a session slot", key)
	}
	most := min(rcpts, limit)
	got, next, err := st.ReserveRcpts(ctx, key, min(leastRcpts, most), most, limit, g.RcptWindow(), now)
	if err != nil || got == 0 {
		release()
		return Ticket{Key: key, Retry: next}, wrap(err, "reserve RCPT commands", key)
	}
	t := Ticket{Key: key, OK: true, Rcpts: got}
	if got < rcpts {
		t.Retry = next
	}
	t.done = func(ctx context.Context, throttled bool) (time.Time, error) {
		ctx = context.WithoutCancel(ctx) // the session is over anyway
		now := g.now()
		if throttled {
			// Paused before the slot goes back: whoever waits for it
			// sees the pause.
			until, err := st.Pause(ctx, key, now, func(level int) time.Duration {
				return Double(g.FirstPause(), cmp.Or(max(g.PauseMax, 0), 15*time.Minute), level)
			})
			release()
			if err != nil {
				return now.Add(g.FirstPause()), wrap(err, "pause", key)
			}
			return until, nil
		}
		release()
		if level > 0 {
			return time.Time{}, wrap(st.ClearPause(ctx, key, now), "clear the pause of", key)
		}
		return time.Time{}, nil
	}
	return t, nil
}

// AdmitAny is Admit over keys (a host's, one per exit: HostKeys), in
// their order: the first that admits, else the refusal that may pass
// first, a wait for a slot before a wait for a time.
func (g *Gate) AdmitAny(ctx context.Context, keys []string, rcpts int) (Ticket, error) {
	var best Ticket
	for i, key := range keys {
		t, err := g.Admit(ctx, key, rcpts)
		if err != nil || t.OK {
			return t, err
		}
		if i == 0 || (t.ForSlot && !best.ForSlot) || (t.ForSlot == best.ForSlot && t.Retry.Before(best.Retry)) {
			best = t
		}
	}
	return best, nil
}

// ExtraSlot takes one more session slot of key, without reserving RCPT
// commands (the admitted ticket reserved those of all the group's
// sessions), for a further session of a group at once. ok is false when
// the provider is paused or its slots are in use.
func (g *Gate) ExtraSlot(ctx context.Context, key string) (release func(), ok bool, err error) {
	st := g.state()
	until, _, err := st.PauseState(ctx, key)
	if err != nil {
		return nil, false, fmt.Errorf("politeness: read the pause of %s: %w", key, err)
	}
	if until.After(g.now()) {
		return nil, false, nil
	}
	sessions, _ := g.Limits.ForKey(key)
	release, ok, err = st.AcquireSlot(ctx, key, sessions, g.HoldFor())
	return release, ok, wrap(err, "take a session slot", key)
}

func wrap(err error, what, key string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("politeness: %s %s: %w", what, key, err)
}

// Session implements verify.Gate: a synchronous verification's session
// to host, admitted by Wait within most (and the context); refused, why
// says by which limit and in how many seconds a retry may pass.
func (g *Gate) Session(ctx context.Context, host string, most time.Duration) (end func(throttled bool), why string) {
	wctx, cancel := context.WithTimeout(ctx, most)
	defer cancel()
	t, err := g.Wait(wctx, []string{g.HostKey(host)}, leastRcpts, most)
	if err == nil && t.OK {
		// A pause that could not be stored changes nothing for this
		// verdict; the next session to the provider meets the same
		// refusal and stores it again.
		return func(throttled bool) { _, _ = t.Done(ctx, throttled) }, ""
	}
	wait, why := g.Until(t.Retry), "every SMTP session we allow to %s at once is in use"
	switch {
	case err != nil:
		wait, why = most, "the state of our limits for %s could not be read"
	case t.Paused:
		why = "%s asked us to slow down and is paused for every check"
	case !t.ForSlot:
		why = "the RCPT commands we allow to %s this minute are spent"
	}
	return nil, fmt.Sprintf("skipped: deferred by our politeness limits: "+why+"; retry in %d s",
		verify.ProviderKey(host), max((wait+time.Second-1)/time.Second, 1))
}

// slotPoll is how often Wait asks a shared State for a slot again: it
// cannot tell when another process's session ends.
const slotPoll = 200 * time.Millisecond

// Wait is AdmitAny that waits: for a session slot until ctx ends, and for
// a pause or the RCPT budget only when that ends within most. When it
// gives up it returns the last refusal, with no error: errors are the
// State's.
func (g *Gate) Wait(ctx context.Context, keys []string, rcpts int, most time.Duration) (Ticket, error) {
	last := g.now().Add(most)
	var refused *Ticket // the last refusal, once there was one
	for {
		var freed <-chan struct{}
		if g.State == nil {
			// Taken before asking: a session that ends between the
			// refusal and the wait still wakes us (of another key, the
			// poll).
			freed = g.state().(*memory).freed(keys[0])
		}
		t, err := g.AdmitAny(ctx, keys, rcpts)
		if err != nil && refused != nil && ctx.Err() != nil {
			// Our wait ended during a later look: the answer is the
			// refusal already read, not a fault of the state.
			return *refused, nil
		}
		if err != nil || t.OK {
			return t, err
		}
		refused = &t
		d := slotPoll
		if !t.ForSlot {
			if t.Retry.After(last) {
				return t, nil
			}
			d, freed = g.Until(t.Retry), nil
		}
		timer := time.NewTimer(d)
		select {
		case <-freed:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return t, nil
		}
		timer.Stop()
	}
}
