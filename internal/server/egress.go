package server

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/metrics"
	"github.com/evs-dev/evs/internal/verify"
)

// Knowing when we are blocked (docs/operations.md). Receivers refuse a
// verifier whose address is on a DNS blocklist, or whose HELO name and
// address do not name each other; their refusals read as unknown/blocked,
// a verdict the user cannot act on. egressWatch says it first, for the one
// egress of this server (direct, or the SOCKS exit): the share of answering
// servers that refused us, per provider over the last blockedWindow, and a
// self-check of the egress address against the blocklists and of the HELO
// name, at start and every selfCheckEvery. /readyz carries both in its
// body (a listed egress still serves quick checks and the API: it stays
// 200) and Prometheus as gauges.

// blockedWindow is how far back the blocked share looks: long enough to
// hold a few sessions per provider, short enough to show a listing that
// started minutes ago.
const blockedWindow = 15 * time.Minute

// selfCheckEvery is how often the self-check runs after the first at start.
const selfCheckEvery = time.Hour

// egressWatch counts answers and refusals per provider and keeps the last
// self-check.
type egressWatch struct {
	name string
	now  func() time.Time
	// key names the provider a verdict is counted under (nil: the
	// verdict's provider, "other" when none).
	key func(evs.Decision) string
	// eg is what the self-check checks: the egress's address, or why
	// it has none.
	eg verify.Egress

	mu      sync.Mutex
	minutes map[string]*[blockedMinutes]minuteCount // by provider
	check   verify.EgressCheck
}

const blockedMinutes = int(blockedWindow / time.Minute)

// minuteCount is one minute's answers and refusals.
type minuteCount struct {
	minute            int64
	answered, blocked int
}

func newEgressWatch(eg verify.Egress, now func() time.Time) *egressWatch {
	return &egressWatch{name: eg.Name, eg: eg, now: now, minutes: map[string]*[blockedMinutes]minuteCount{}}
}

// observe counts a live verdict whose SMTP stage got a reply. A test-mode
// verdict's evidence is made up, and a verdict with no reply says nothing
// of how servers see us.
func (w *egressWatch) observe(ds ...evs.Decision) {
	counts := func(d evs.Decision) bool { return !d.TestMode && d.Checks.SMTP.Code != 0 }
	if !slices.ContainsFunc(ds, counts) {
		// Quick checks and unanswered probes, most of /v1/verify's
		// calls, take neither the clock nor the lock.
		return
	}
	m := w.now().Unix() / 60
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range ds {
		if !counts(d) {
			continue
		}
		p := string(d.Checks.SMTP.Provider)
		if w.key != nil {
			p = w.key(d)
		}
		if p == "" {
			p = "other"
		}
		ring := w.minutes[p]
		if ring == nil {
			ring = new([blockedMinutes]minuteCount)
			w.minutes[p] = ring
		}
		c := &ring[m%int64(blockedMinutes)]
		if c.minute != m {
			*c = minuteCount{minute: m}
		}
		c.answered++
		if d.Reason == evs.ReasonBlocked {
			c.blocked++
		}
	}
}

// providerShare is one provider's figures over the window.
type providerShare struct {
	Provider string  `json:"provider"`
	Answered int     `json:"answered"`
	Blocked  int     `json:"blocked"`
	Share    float64 `json:"share"`
}

// shares returns each provider's figures over the window, by provider.
func (w *egressWatch) shares() []providerShare {
	oldest := w.now().Unix()/60 - int64(blockedMinutes) + 1
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []providerShare
	for p, ring := range w.minutes {
		s := providerShare{Provider: p}
		for _, c := range ring {
			if c.minute >= oldest {
				s.Answered += c.answered
				s.Blocked += c.blocked
			}
		}
		if s.Answered == 0 {
			continue
		}
		s.Share = float64(s.Blocked) / float64(s.Answered)
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b providerShare) int { return cmp.Compare(a.Provider, b.Provider) })
	return out
}

// share returns provider's answers and refusals over the window.
func (w *egressWatch) share(provider string) (answered, blocked int) {
	oldest := w.now().Unix()/60 - int64(blockedMinutes) + 1
	w.mu.Lock()
	defer w.mu.Unlock()
	ring := w.minutes[provider]
	if ring == nil {
		return 0, 0
	}
	for _, c := range ring {
		if c.minute >= oldest {
			answered += c.answered
			blocked += c.blocked
		}
	}
	return answered, blocked
}

// An exit stops taking a provider's new sessions while, over the window,
// at least avoidAnswered of its verdicts for that provider got a reply
// and at least avoidShare of those were refusals of us: the provider's
// servers are likely refusing the exit's address (a blocklist). It takes
// them again once the window has aged the refusals out, and then is
// judged on new ones.
const (
	avoidShare    = 0.5
	avoidAnswered = 5
)

// high tells whether provider's refusals of us are high enough to avoid
// this egress for it.
func (w *egressWatch) high(provider string) bool {
	answered, blocked := w.share(provider)
	return answered >= avoidAnswered && float64(blocked) >= avoidShare*float64(answered)
}

// egressReport is the "egress" object of /readyz's body.
type egressReport struct {
	Name      string          `json:"name"`
	CheckedAt *evs.Time       `json:"checkedAt"`
	Blocked   []providerShare `json:"blocked"`
	verify.EgressCheck
	// Exits are the SOCKS exits' own reports (EVS_SMTP=proxy).
	Exits []exitReport `json:"exits,omitempty"`
}

// exitReport is one SOCKS exit in /readyz's egress object.
type exitReport struct {
	Index int  `json:"index"`
	Up    bool `json:"up"`
	// Since is when Up last changed; absent when it never did.
	Since  *evs.Time `json:"since,omitempty"`
	Detail string    `json:"detail,omitempty"`
	// Avoided are the providers this exit takes no new session of while
	// another exit can (avoidShare).
	Avoided []string `json:"avoided"`
	egressReport
}

// report is what /readyz says of the egress.
func (w *egressWatch) report() egressReport {
	r := egressReport{Name: w.name, Blocked: w.shares()}
	w.mu.Lock()
	r.EgressCheck = w.check
	w.mu.Unlock()
	if !r.At.IsZero() {
		r.CheckedAt = &evs.Time{Time: r.At}
	}
	if r.Blocked == nil {
		r.Blocked = []providerShare{}
	}
	if r.Blocklists == nil {
		r.Blocklists = []verify.Listing{}
	}
	return r
}

// listed tells whether the last self-check found the egress address on a
// DNS blocklist.
func (w *egressWatch) listed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.check.Listed()) > 0
}

// selfCheck runs one self-check (verify.CheckEgress) of the egress, and
// keeps and logs its findings.
func (w *egressWatch) selfCheck(ctx context.Context, dns verify.Reputation, zones []string, helo string, log *slog.Logger) {
	c := verify.CheckEgress(ctx, dns, w.eg, zones, helo, w.now())
	c.Warn(log, w.name)
	w.mu.Lock()
	w.check = c
	w.mu.Unlock()
}

// run self-checks at once and then every interval until ctx ends.
func (w *egressWatch) run(ctx context.Context, every time.Duration, check func(ctx context.Context)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		check(cctx)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Describe and Collect make the watch a Prometheus collector of its
// gauges, read at each scrape.
var (
	blockedShareDesc = prometheus.NewDesc("evs_smtp_blocked_share",
		"Share of live verdicts with an SMTP reply that were a refusal of us (reason blocked), per provider, over the last 15 minutes.",
		[]string{"egress", "provider"}, nil)
	egressListedDesc = prometheus.NewDesc(metrics.EgressListed,
		"1 when the last self-check found the egress address on the DNS blocklist, 0 when not, absent when the list gave no answer.",
		[]string{"egress", "list"}, nil)
	heloConfirmedDesc = prometheus.NewDesc(metrics.EgressHELOConfirmed,
		"1 when the last self-check found the HELO name and the egress address naming each other in DNS (or, address unknown, the name resolving).",
		[]string{"egress"}, nil)
)

// Describe implements prometheus.Collector.
func (w *egressWatch) Describe(ch chan<- *prometheus.Desc) {
	ch <- blockedShareDesc
	ch <- egressListedDesc
	ch <- heloConfirmedDesc
}

// Collect implements prometheus.Collector.
func (w *egressWatch) Collect(ch chan<- prometheus.Metric) {
	for _, s := range w.shares() {
		ch <- prometheus.MustNewConstMetric(blockedShareDesc, prometheus.GaugeValue, s.Share, w.name, s.Provider)
	}
	w.mu.Lock()
	c := w.check
	w.mu.Unlock()
	for _, l := range c.Blocklists {
		if l.Error != "" {
			continue
		}
		ch <- prometheus.MustNewConstMetric(egressListedDesc, prometheus.GaugeValue, boolGauge(l.Listed), w.name, l.Zone)
	}
	if c.HELO != nil {
		ch <- prometheus.MustNewConstMetric(heloConfirmedDesc, prometheus.GaugeValue, boolGauge(c.HELO.OK), w.name)
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// watched is an Engine whose live verdicts the egress watches count.
type watched struct {
	Engine
	w *egressWatches
}

// Verify implements Engine.
func (e watched) Verify(ctx context.Context, in verify.Inspection, mode evs.Mode) evs.Decision {
	d := e.Engine.Verify(ctx, in, mode)
	e.w.observe(d)
	return d
}

// VerifyDomain implements Engine.
func (e watched) VerifyDomain(ctx context.Context, emails []string, mode evs.Mode) []evs.Decision {
	ds := e.Engine.VerifyDomain(ctx, emails, mode)
	e.w.observe(ds...)
	return ds
}

// egressWatches are the server's watches: one per SOCKS exit (Exits),
// whose blocked shares steer the exits away from providers that refuse
// them, and the one /readyz's egress object reports: the direct egress,
// the one exit, or, with several, every verdict together.
type egressWatches struct {
	top *egressWatch
	// x and exits are nil when SMTP goes direct (or is off).
	x     *verify.Exits
	exits []*egressWatch
}

// exitProbeEvery is how often evs serve probes every SOCKS exit's health
// (verify.Exits.Run); a dial probes an exit out of rotation sooner.
const exitProbeEvery = 15 * time.Second

// newEgressWatches returns the watches of c's egress: through x's exits
// when x is not nil, whose names it takes, and which it steers.
func newEgressWatches(c config.Config, x *verify.Exits, now func() time.Time) *egressWatches {
	ws := &egressWatches{}
	if x == nil {
		ws.top = newEgressWatch(verify.DirectEgress(c), now)
		return ws
	}
	ws.x = x
	// The exits' own names and order are x's; their addresses are in
	// the configuration they were made from.
	egs := verify.ExitEgresses(c.SMTPExits)
	for i, st := range x.Status() {
		eg := verify.Egress{Name: st.Name}
		if i < len(egs) {
			eg.IP, eg.NoIP = egs[i].IP, egs[i].NoIP
		}
		w := newEgressWatch(eg, now)
		// The provider an exit is steered by is its MX host's (the exit
		// knows no reply), so the exit's watch counts it so too.
		w.key = func(d evs.Decision) string {
			if d.Checks.SMTP.Host == "" {
				return string(d.Checks.SMTP.Provider)
			}
			return verify.HostProvider(d.Checks.SMTP.Host)
		}
		ws.exits = append(ws.exits, w)
	}
	if len(ws.exits) == 1 {
		ws.top = ws.exits[0]
	} else {
		names := make([]string, len(ws.exits))
		for i, w := range ws.exits {
			names[i] = w.name
		}
		// As config.Config.EgressName names it.
		ws.top = newEgressWatch(verify.Egress{Name: strings.Join(names, "+")}, now)
		ws.top.check.Note = "several SOCKS exits: each one's self-check is in exits"
	}
	x.SetAvoid(ws.avoid)
	return ws
}

// avoid is the exits' Avoid: exit i's last self-check found its address
// on a DNS blocklist, or host's provider has refused too many of its
// probes. A listed exit is avoided for every provider: receivers that use
// the list refuse it, and which do is not known before they answer, while
// an exit not listed costs nothing to prefer. It takes them again once a
// self-check finds it clean (within one check interval).
func (ws *egressWatches) avoid(i int, host string) bool {
	return ws.exits[i].listed() || ws.exits[i].high(verify.HostProvider(host))
}

// observe counts verdicts: under the exit the provider goes to now (it
// sticks to one), and together.
func (ws *egressWatches) observe(ds ...evs.Decision) {
	if ws.x == nil || len(ws.exits) > 1 {
		ws.top.observe(ds...)
	}
	if ws.x == nil {
		return
	}
	for _, d := range ds {
		if i := ws.x.For(d.Checks.SMTP.Host); i >= 0 {
			ws.exits[i].observe(d)
		}
	}
}

// selfCheck runs the self-check of the direct egress, or of each exit.
func (ws *egressWatches) selfCheck(ctx context.Context, dns verify.Reputation, zones []string, helo string, log *slog.Logger) {
	if ws.x == nil {
		ws.top.selfCheck(ctx, dns, zones, helo, log)
		return
	}
	for _, w := range ws.exits {
		w.selfCheck(ctx, dns, zones, helo, log)
	}
}

// report is /readyz's egress object.
func (ws *egressWatches) report() egressReport {
	r := ws.top.report()
	if ws.x == nil {
		return r
	}
	r.Exits = []exitReport{}
	for i, st := range ws.x.Status() {
		er := exitReport{Index: i, Up: st.Up, Detail: st.Detail, Avoided: []string{}, egressReport: ws.exits[i].report()}
		if !st.Since.IsZero() {
			er.Since = &evs.Time{Time: st.Since}
		}
		for _, s := range er.Blocked {
			if ws.exits[i].high(s.Provider) {
				er.Avoided = append(er.Avoided, s.Provider)
			}
		}
		r.Exits = append(r.Exits, er)
	}
	return r
}

var exitUpDesc = prometheus.NewDesc("evs_smtp_exit_up",
	"1 while the SOCKS exit is in rotation, 0 while it is out (its health failed).",
	[]string{"exit", "index"}, nil)

// Describe implements prometheus.Collector.
func (ws *egressWatches) Describe(ch chan<- *prometheus.Desc) {
	ws.top.Describe(ch)
	if ws.x != nil {
		ch <- exitUpDesc
	}
}

// Collect implements prometheus.Collector: the direct egress's gauges, or
// each exit's, labelled egress by its name (never its credentials).
func (ws *egressWatches) Collect(ch chan<- prometheus.Metric) {
	if ws.x == nil {
		ws.top.Collect(ch)
		return
	}
	for i, st := range ws.x.Status() {
		ch <- prometheus.MustNewConstMetric(exitUpDesc, prometheus.GaugeValue, boolGauge(st.Up), st.Name, strconv.Itoa(i))
		ws.exits[i].Collect(ch)
	}
}
