package server

import (
	"cmp"
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/evs-dev/evs/internal/evs"
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

	mu      sync.Mutex
	minutes map[string]*[blockedMinutes]minuteCount // by provider
	check   egressCheck
}

const blockedMinutes = int(blockedWindow / time.Minute)

// minuteCount is one minute's answers and refusals.
type minuteCount struct {
	minute            int64
	answered, blocked int
}

func newEgressWatch(name string, now func() time.Time) *egressWatch {
	return &egressWatch{name: name, now: now, minutes: map[string]*[blockedMinutes]minuteCount{}}
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

// egressCheck is one self-check's findings.
type egressCheck struct {
	At         time.Time         `json:"-"`
	Address    string            `json:"address,omitempty"`
	Blocklists []verify.Listing  `json:"blocklists"`
	HELO       *verify.HELOCheck `json:"helo,omitempty"`
	Note       string            `json:"note,omitempty"`
}

// egressReport is the "egress" object of /readyz's body.
type egressReport struct {
	Name      string          `json:"name"`
	CheckedAt *evs.Time       `json:"checkedAt"`
	Blocked   []providerShare `json:"blocked"`
	egressCheck
}

// report is what /readyz says of the egress.
func (w *egressWatch) report() egressReport {
	r := egressReport{Name: w.name, Blocked: w.shares()}
	w.mu.Lock()
	r.egressCheck = w.check
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

// reputation is the DNS side of the self-check; the engine's resolver
// (verify.NewResolver) is one.
type reputation interface {
	Blocklisted(ctx context.Context, ip netip.Addr, zone string) verify.Listing
	ConfirmHELO(ctx context.Context, name string, ip netip.Addr) verify.HELOCheck
}

// selfCheck runs one self-check of ip (the zero Addr when not known)
// against zones, and of helo, and keeps its findings; what is wrong is
// logged as a warning, for an operator who reads no dashboard.
func (w *egressWatch) selfCheck(ctx context.Context, dns reputation, ip netip.Addr, zones []string, helo string, log *slog.Logger) {
	c := egressCheck{At: w.now(), Blocklists: []verify.Listing{}}
	if ip.IsValid() {
		c.Address = ip.String()
		for _, z := range zones {
			l := dns.Blocklisted(ctx, ip, z)
			c.Blocklists = append(c.Blocklists, l)
			if l.Listed {
				log.Warn("the egress address is on a DNS blocklist: receivers will refuse our probes (unknown/blocked)",
					slog.String("egress", w.name), slog.String("address", c.Address), slog.String("list", z), slog.Any("codes", l.Codes))
			}
		}
	} else if len(zones) > 0 {
		c.Note = "EVS_SMTP_EGRESS_IP is not set: the blocklists and the reverse DNS are not checked"
	}
	if helo != "" {
		h := dns.ConfirmHELO(ctx, helo, ip)
		c.HELO = &h
		if !h.OK {
			log.Warn("the HELO name fails the checks receivers make", slog.String("egress", w.name), slog.String("detail", h.Detail))
		}
	}
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
	egressListedDesc = prometheus.NewDesc("evs_egress_listed",
		"1 when the last self-check found the egress address on the DNS blocklist, 0 when not, absent when the list gave no answer.",
		[]string{"egress", "list"}, nil)
	heloConfirmedDesc = prometheus.NewDesc("evs_egress_helo_confirmed",
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

// watched is an Engine whose live verdicts the egress watch counts.
type watched struct {
	Engine
	w *egressWatch
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
