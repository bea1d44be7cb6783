package server

import (
	"cmp"
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// Knowing when we are blocked (docs/operations.md): the engine's watches
// (verify.EgressWatches) as evs serve shows them, in /readyz's body (a
// listed egress stays 200) and Prometheus gauges.

// egressWatch is one egress's watch, as evs serve shows it.
type egressWatch struct {
	*verify.EgressWatch
	name string
	// note, when set, replaces the self-check's note (a watch that is no
	// single egress's).
	note string
}

func newEgressWatch(w *verify.EgressWatch) *egressWatch {
	return &egressWatch{EgressWatch: w, name: w.Name()}
}

// egressReport is the "egress" object of /readyz's body.
type egressReport struct {
	Name      string                 `json:"name"`
	CheckedAt *evs.Time              `json:"checkedAt"`
	Blocked   []verify.ProviderShare `json:"blocked"`
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
	// another exit can (verify.AvoidShare).
	Avoided []string `json:"avoided"`
	egressReport
}

// report is what /readyz says of the egress.
func (w *egressWatch) report() egressReport {
	r := egressReport{Name: w.name, Blocked: w.Shares(), EgressCheck: w.Check()}
	r.Note = cmp.Or(w.note, r.Note)
	if !r.At.IsZero() {
		r.CheckedAt = &evs.Time{Time: r.At}
	}
	if r.Blocked == nil {
		r.Blocked = []verify.ProviderShare{}
	}
	if r.Blocklists == nil {
		r.Blocklists = []verify.Listing{}
	}
	return r
}

// runEvery runs check at once and then every interval until ctx ends.
func runEvery(ctx context.Context, every time.Duration, check func(ctx context.Context)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		check(ctx)
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
	egressListedDesc = prometheus.NewDesc(app.EgressListed,
		"1 when the last self-check found the egress address on the DNS blocklist, 0 when not, absent when the list gave no answer.",
		[]string{"egress", "list"}, nil)
	heloConfirmedDesc = prometheus.NewDesc(app.EgressHELOConfirmed,
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
	for _, s := range w.Shares() {
		ch <- prometheus.MustNewConstMetric(blockedShareDesc, prometheus.GaugeValue, s.Share, w.name, s.Provider)
	}
	c := w.Check()
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

// egressWatches show the runtime's watches (verify.EgressWatches).
type egressWatches struct {
	top *egressWatch
	// x and exits are nil when SMTP goes direct (or is off).
	x     *verify.Exits
	exits []*egressWatch
}

// exitProbeEvery is how often evs serve probes every SOCKS exit's health
// (verify.Exits.Run); a dial probes an exit out of rotation sooner.
const exitProbeEvery = 15 * time.Second

// newEgressWatches returns how evs serve shows ws.
func newEgressWatches(ws *verify.EgressWatches) *egressWatches {
	out := &egressWatches{top: newEgressWatch(ws.All()), x: ws.Exits()}
	if out.x == nil {
		return out
	}
	for _, w := range ws.Watches() {
		out.exits = append(out.exits, newEgressWatch(w))
	}
	if len(out.exits) > 1 {
		out.top.note = "several SOCKS exits: each one's self-check is in exits"
	}
	return out
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
			if ws.exits[i].High(s.Provider) {
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
