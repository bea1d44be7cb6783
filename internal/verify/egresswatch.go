package verify

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
)

// Knowing when we are blocked, and steering around it (docs/operations.md):
// receivers refuse a verifier whose address is on a DNS blocklist, or whose
// HELO name and address do not match, and their refusals read as
// unknown/blocked. An EgressWatch says so first, for one egress: the share
// of answering servers that refused us, per provider over BlockedWindow,
// and its last self-check (CheckEgress). With several exits, EgressWatches
// turn both into the exits' Avoid. Each process keeps its own watches.

// BlockedWindow is how far back the blocked share looks: a few sessions
// per provider, and a listing that started minutes ago.
const BlockedWindow = 15 * time.Minute

// SelfCheckEvery is the self-check's default period after the first at
// start (config.Config.SelfCheckEvery).
const SelfCheckEvery = time.Hour

// An exit stops taking a provider's new sessions while, over the window,
// at least AvoidAnswered of its verdicts for that provider got a reply and
// at least AvoidShare of those were refusals of us, until the window has
// aged the refusals out.
const (
	AvoidShare    = 0.5
	AvoidAnswered = 5
)

const blockedMinutes = int(BlockedWindow / time.Minute)

type minuteCount struct {
	minute            int64
	answered, blocked int
}

// EgressWatch counts one egress's answers and refusals per provider, and
// keeps its last self-check; safe for concurrent use.
type EgressWatch struct {
	eg  Egress
	now func() time.Time
	key func(evs.Decision) string // the provider a verdict is counted under (nil: its own)

	mu      sync.Mutex
	minutes map[string]*[blockedMinutes]minuteCount // by provider
	check   EgressCheck
}

// NewEgressWatch returns the watch of eg, counting each verdict under its
// provider ("other" when none).
func NewEgressWatch(eg Egress, now func() time.Time) *EgressWatch {
	return &EgressWatch{eg: eg, now: now, minutes: map[string]*[blockedMinutes]minuteCount{}}
}

// Name returns the egress's name.
func (w *EgressWatch) Name() string { return w.eg.Name }

// Counts tells whether d says anything of how servers see us: a live
// verdict whose SMTP stage got a reply.
func Counts(d evs.Decision) bool { return !d.TestMode && d.Checks.SMTP.Code != 0 }

// Observe counts the verdicts that Counts.
func (w *EgressWatch) Observe(ds ...evs.Decision) {
	if !slices.ContainsFunc(ds, Counts) { // most calls: neither the clock nor the lock
		return
	}
	m := w.now().Unix() / 60
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range ds {
		if !Counts(d) {
			continue
		}
		w.count(m, w.provider(d), d.Reason == evs.ReasonBlocked)
	}
}

func (w *EgressWatch) provider(d evs.Decision) string {
	p := string(d.Checks.SMTP.Provider)
	if w.key != nil {
		p = w.key(d)
	}
	return cmp.Or(p, "other")
}

// count adds one answer in minute m, under w.mu.
func (w *EgressWatch) count(m int64, provider string, blocked bool) {
	ring := w.minutes[provider]
	if ring == nil {
		ring = new([blockedMinutes]minuteCount)
		w.minutes[provider] = ring
	}
	c := &ring[m%int64(blockedMinutes)]
	if c.minute != m {
		*c = minuteCount{minute: m}
	}
	c.answered++
	if blocked {
		c.blocked++
	}
}

// ProviderShare is one provider's figures over the window.
type ProviderShare struct {
	Provider string  `json:"provider"`
	Answered int     `json:"answered"`
	Blocked  int     `json:"blocked"`
	Share    float64 `json:"share"`
}

// Shares returns each provider's figures over the window, by provider.
func (w *EgressWatch) Shares() []ProviderShare {
	oldest := w.now().Unix()/60 - int64(blockedMinutes) + 1
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []ProviderShare
	for p, ring := range w.minutes {
		s := ProviderShare{Provider: p}
		s.Answered, s.Blocked = sum(ring, oldest)
		if s.Answered == 0 {
			continue
		}
		s.Share = float64(s.Blocked) / float64(s.Answered)
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b ProviderShare) int { return cmp.Compare(a.Provider, b.Provider) })
	return out
}

func sum(ring *[blockedMinutes]minuteCount, oldest int64) (answered, blocked int) {
	for _, c := range ring {
		if c.minute >= oldest {
			answered += c.answered
			blocked += c.blocked
		}
	}
	return answered, blocked
}

// Share returns provider's answers and refusals over the window.
func (w *EgressWatch) Share(provider string) (answered, blocked int) {
	oldest := w.now().Unix()/60 - int64(blockedMinutes) + 1
	w.mu.Lock()
	defer w.mu.Unlock()
	ring := w.minutes[provider]
	if ring == nil {
		return 0, 0
	}
	return sum(ring, oldest)
}

// High tells whether provider's refusals of us are high enough to avoid
// this egress for it (AvoidShare of at least AvoidAnswered).
func (w *EgressWatch) High(provider string) bool {
	answered, blocked := w.Share(provider)
	return answered >= AvoidAnswered && float64(blocked) >= AvoidShare*float64(answered)
}

// SelfCheck runs one self-check (CheckEgress) of the egress, keeps its
// findings, logs what is wrong, and returns them. A check that ctx cut
// short is not kept (ok false): its unanswered lists would un-list a
// listed exit.
func (w *EgressWatch) SelfCheck(ctx context.Context, rep Reputation, zones []string, helo string, log *slog.Logger) (c EgressCheck, ok bool) {
	c = CheckEgress(ctx, rep, w.eg, zones, helo, w.now())
	if ctx.Err() != nil {
		return c, false
	}
	c.Warn(log, w.eg.Name)
	w.mu.Lock()
	w.check = c
	w.mu.Unlock()
	return c, true
}

// Check returns the last self-check (zero before the first).
func (w *EgressWatch) Check() EgressCheck {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.check
}

// Listed tells whether the last self-check found the egress address on a
// DNS blocklist.
func (w *EgressWatch) Listed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.check.Listed()) > 0
}

// EgressWatches are a deployment's watches of its egress: one per SOCKS
// exit, which steer the exits (Avoid), or the direct egress's one.
type EgressWatches struct {
	x       *Exits // nil when SMTP goes direct (or is off)
	ws      []*EgressWatch
	all     *EgressWatch // every verdict together: ws[0], or with several exits its own
	counted func(egress, provider string, blocked bool)
}

// WatchEgress returns the watches of c's egress: each of x's exits, which
// it steers (Exits.SetAvoid), else the direct egress. counted, when not
// nil, is told each verdict counted (the AWS functions' EMF metrics).
func WatchEgress(c config.Config, x *Exits, now func() time.Time, counted func(egress, provider string, blocked bool)) *EgressWatches {
	ws := &EgressWatches{x: x, counted: counted}
	if x == nil {
		ws.ws = []*EgressWatch{NewEgressWatch(DirectEgress(c), now)}
		ws.all = ws.ws[0]
		return ws
	}
	egs := ExitEgresses(c.SMTPExits) // their addresses; names and order are x's
	var names []string
	for i, st := range x.Status() {
		names = append(names, st.Name)
		eg := Egress{Name: st.Name}
		if i < len(egs) {
			eg.IP, eg.NoIP = egs[i].IP, egs[i].NoIP
		}
		w := NewEgressWatch(eg, now)
		// An exit is steered by its MX host's provider (it knows no
		// reply), so its watch counts by that too.
		w.key = func(d evs.Decision) string {
			if d.Checks.SMTP.Host == "" {
				return string(d.Checks.SMTP.Provider)
			}
			return HostProvider(d.Checks.SMTP.Host)
		}
		ws.ws = append(ws.ws, w)
	}
	x.SetAvoid(ws.Avoid)
	ws.all = ws.ws[0]
	if len(ws.ws) > 1 { // named as config.Config.EgressName names it
		ws.all = NewEgressWatch(Egress{Name: strings.Join(names, "+")}, now)
	}
	return ws
}

// Watches returns one watch per exit, in their order, or the direct one.
func (ws *EgressWatches) Watches() []*EgressWatch { return ws.ws }

// All returns the watch of every verdict together (with several exits,
// one no self-check checks).
func (ws *EgressWatches) All() *EgressWatch { return ws.all }

// Exits returns the exits steered, or nil when SMTP goes direct.
func (ws *EgressWatches) Exits() *Exits { return ws.x }

// Avoid is the exits' Avoid: exit i's last self-check found its address
// on a DNS blocklist (avoided for every provider: which use the list is
// not known before they answer), or host's provider has refused too many
// of its probes (High).
func (ws *EgressWatches) Avoid(i int, host string) bool {
	return ws.ws[i].Listed() || ws.ws[i].High(HostProvider(host))
}

// Observe counts verdicts of sessions dialled with ctx under the egress
// they went through: the exit of ctx (smtpprobe.WithExit) or that their
// provider prefers now, or the direct egress.
func (ws *EgressWatches) Observe(ctx context.Context, ds ...evs.Decision) {
	if len(ws.ws) > 1 {
		ws.all.Observe(ds...)
	}
	for _, d := range ds {
		if !Counts(d) {
			continue
		}
		w := ws.ws[0]
		if ws.x != nil {
			i := ws.x.Through(ctx, d.Checks.SMTP.Host)
			if i < 0 {
				continue
			}
			w = ws.ws[i]
		}
		w.Observe(d)
		if ws.counted != nil {
			ws.counted(w.Name(), w.provider(d), d.Reason == evs.ReasonBlocked)
		}
	}
}

// SelfCheck runs the self-check of each egress, keeps its findings and
// tells done, when not nil, each one's. It reports whether every check
// ran to its end.
func (ws *EgressWatches) SelfCheck(ctx context.Context, rep Reputation, zones []string, helo string, log *slog.Logger, done func(egress string, c EgressCheck)) (complete bool) {
	for _, w := range ws.ws {
		c, ok := w.SelfCheck(ctx, rep, zones, helo, log)
		if !ok {
			return false
		}
		if done != nil {
			done(w.Name(), c)
		}
	}
	return true
}

// SelfChecker runs the self-check of a deployment's watches where nothing
// runs between requests (a Lambda instance): when the last one started
// more than Every ago, in the background (Due), or at once (Run).
type SelfChecker struct {
	Watches *EgressWatches
	Rep     Reputation
	Zones   []string
	HELO    string
	Every   time.Duration // how old the findings may grow (default SelfCheckEvery)
	Timeout time.Duration // of one check (default 30 s)
	Log     *slog.Logger
	Done    func(egress string, c EgressCheck) // told each egress's findings (EMF metrics)
	Now     func() time.Time

	mu      sync.Mutex
	running bool
	started time.Time // the last check's start; zero before the first
}

func (s *SelfChecker) now() time.Time { return evs.Now(s.Now) }

// begin marks a check started unless one is running or, when onlyDue, the
// last is younger than Every.
func (s *SelfChecker) begin(onlyDue bool) bool {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running || onlyDue && !s.started.IsZero() && now.Sub(s.started) < cmp.Or(s.Every, SelfCheckEvery) {
		return false
	}
	s.running, s.started = true, now
	return true
}

// Due starts a check in the background when the last is older than Every
// and none is running; it never waits.
func (s *SelfChecker) Due() {
	if s.begin(true) {
		go s.run(context.Background())
	}
}

// Run runs a check now, unless one is running, and returns when it is
// done (the worker's hourly schedule message).
func (s *SelfChecker) Run(ctx context.Context) {
	if s.begin(false) {
		s.run(ctx)
	}
}

func (s *SelfChecker) run(ctx context.Context) {
	type finding struct {
		egress string
		c      EgressCheck
	}
	var found []finding
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(s.Timeout, 30*time.Second))
	defer cancel()
	log := cmp.Or(s.Log, slog.New(slog.DiscardHandler))
	complete := s.Watches.SelfCheck(ctx, s.Rep, s.Zones, s.HELO, log, func(egress string, c EgressCheck) {
		found = append(found, finding{egress, c})
	})
	s.mu.Lock()
	s.running = false
	if !complete {
		s.started = time.Time{} // cut short: the next call checks again
	}
	s.mu.Unlock()
	// Told once the check is over, so that whoever hears of it may start
	// the next (a schedule message right after would otherwise find this
	// one still running, and be skipped).
	if s.Done != nil {
		for _, f := range found {
			s.Done(f.egress, f.c)
		}
	}
}

// Verifier verifies single addresses and domain groups: the engine is one.
type Verifier interface {
	Verify(ctx context.Context, in Inspection, mode evs.Mode) evs.Decision
	VerifyDomain(ctx context.Context, emails []string, mode evs.Mode) []evs.Decision
}

// Watched returns e with its verdicts counted by ws, and before (when not
// nil, a SelfChecker's Due) called ahead of each call.
func (ws *EgressWatches) Watched(e Verifier, before func()) Verifier {
	return watched{e, ws, before}
}

type watched struct {
	e      Verifier
	ws     *EgressWatches
	before func()
}

func (w watched) Verify(ctx context.Context, in Inspection, mode evs.Mode) evs.Decision {
	if w.before != nil {
		w.before()
	}
	d := w.e.Verify(ctx, in, mode)
	w.ws.Observe(ctx, d)
	return d
}

func (w watched) VerifyDomain(ctx context.Context, emails []string, mode evs.Mode) []evs.Decision {
	if w.before != nil {
		w.before()
	}
	ds := w.e.VerifyDomain(ctx, emails, mode)
	w.ws.Observe(ctx, ds...)
	return ds
}
