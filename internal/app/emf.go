package app

import (
	"cmp"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// namespace is the CloudWatch namespace of the EMF metrics.
const namespace = "evs"

// EMF writes each observation as one CloudWatch Embedded Metric Format line
// (a JSON log line CloudWatch Logs turns into metrics): the Lambda
// functions count without any extra API call.
type EMF struct {
	W   io.Writer
	Now func() time.Time
	// Hold, when set (the worker function), sums the counts (unit
	// "Count") of one metric and dimensions until Flush, which the worker
	// calls as each invocation ends, or until a minute has passed: a line
	// per kind of count instead of one per address, which made the logs
	// the cost of a million addresses' largest line but one (the sums are
	// what the dashboards and alarms read).
	Hold bool

	mu       sync.Mutex
	held     map[string]*heldLine
	order    []string  // held's keys, first held first
	heldFrom time.Time // when the oldest held count came
}

// heldLine is the sums of one kind of count until Flush.
type heldLine struct {
	vs        []emfValue
	alsoTotal bool
	dims      []string
}

type emfMetric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type emfDirective struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []emfMetric `json:"Metrics"`
}

// write emits one line: value of metric name with the given dimensions.
func (e *EMF) write(name, unit string, value float64, dims ...string) {
	e.writeLine([]emfValue{{name, unit, value}}, false, dims...)
}

// emfValue is one metric of a line.
type emfValue struct {
	name, unit string
	value      float64
}

// writeLine emits one line holding every metric of vs, with the given
// dimensions (and none, when alsoTotal: one line, two dimension sets).
func (e *EMF) writeLine(vs []emfValue, alsoTotal bool, dims ...string) {
	if e.Hold && !slices.ContainsFunc(vs, func(v emfValue) bool { return v.unit != "Count" }) {
		e.hold(vs, alsoTotal, dims)
		return
	}
	e.emit(vs, alsoTotal, dims...)
}

func (e *EMF) now() time.Time { return evs.Now(e.Now) }

// hold adds vs to the sums of their kind, and flushes the sums held for a
// minute: a metric is never later than that.
func (e *EMF) hold(vs []emfValue, alsoTotal bool, dims []string) {
	key := strings.Join(dims, "\x00") + "\x01" + strconv.FormatBool(alsoTotal)
	for _, v := range vs {
		key += "\x01" + v.name
	}
	e.mu.Lock()
	if e.held == nil {
		e.held = map[string]*heldLine{}
	}
	h, ok := e.held[key]
	if !ok {
		if len(e.held) == 0 {
			e.heldFrom = e.now()
		}
		h = &heldLine{vs: slices.Clone(vs), alsoTotal: alsoTotal, dims: slices.Clone(dims)}
		e.held[key] = h
		e.order = append(e.order, key)
	} else {
		for i, v := range vs {
			h.vs[i].value += v.value
		}
	}
	due := e.now().Sub(e.heldFrom) >= time.Minute
	e.mu.Unlock()
	if due {
		e.Flush()
	}
}

// Flush writes the held sums, a line per kind.
func (e *EMF) Flush() {
	e.mu.Lock()
	held, order := e.held, e.order
	e.held, e.order = nil, nil
	e.mu.Unlock()
	for _, k := range order {
		h := held[k]
		e.emit(h.vs, h.alsoTotal, h.dims...)
	}
}

func (e *EMF) emit(vs []emfValue, alsoTotal bool, dims ...string) {
	now := e.now
	rec := map[string]any{}
	keys := []string{}
	for i := 0; i+1 < len(dims); i += 2 {
		rec[dims[i]] = dims[i+1]
		keys = append(keys, dims[i])
	}
	ms := make([]emfMetric, len(vs))
	for i, v := range vs {
		rec[v.name] = v.value
		ms[i] = emfMetric{Name: v.name, Unit: v.unit}
	}
	sets := [][]string{keys}
	if alsoTotal {
		sets = append(sets, []string{})
	}
	rec["_aws"] = map[string]any{
		"Timestamp": now().UnixMilli(),
		"CloudWatchMetrics": []emfDirective{{
			Namespace: namespace, Dimensions: sets, Metrics: ms,
		}},
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return
	}
	b = append(b, '\n')
	e.mu.Lock()
	defer e.mu.Unlock()
	_, _ = e.W.Write(b)
}

// HTTPRequest implements Observer.
func (e *EMF) HTTPRequest(route string, code int, d time.Duration) {
	e.write(HttpRequests, "Count", 1, "route", route, "code", strconv.Itoa(code))
	e.write(HttpRequestDuration, "Seconds", d.Seconds(), "route", route)
}

// Verification implements Observer.
func (e *EMF) Verification(mode evs.Mode, status evs.Status, reason evs.Reason) {
	e.write(Verifications, "Count", 1, "mode", string(mode), "status", string(status), "reason", string(reason))
}

// SMTPReply implements Observer.
func (e *EMF) SMTPReply(class string) { e.write(SmtpReplies, "Count", 1, "class", class) }

// DNSLookup implements Observer.
func (e *EMF) DNSLookup(d time.Duration) { e.write(DnsLookupDuration, "Seconds", d.Seconds()) }

// WebhookDelivery implements Observer.
func (e *EMF) WebhookDelivery(result string) {
	e.write(WebhookDeliveries, "Count", 1, "result", result)
}

// SMTPConnectionFailure implements Observer.
func (e *EMF) SMTPConnectionFailure(result string) {
	e.write(SmtpConnectionFailures, "Count", 1, "result", result)
}

// StoreError implements Observer.
func (e *EMF) StoreError(source string) { e.write(StoreErrors, "Count", 1, "source", source) }

// SMTPExit is told each health verdict of a SOCKS exit. One that takes the
// exit out of rotation, or keeps it out, is counted under the exit's name
// (never its credentials) and under no dimension, for the alarm on any.
func (e *EMF) SMTPExit(_ int, name string, up bool) {
	if !up {
		e.writeLine([]emfValue{{SmtpExitDown, "Count", 1}}, true, "exit", name)
	}
}

// SMTPAnswer counts one live verdict with an SMTP reply through egress to
// provider, and whether it refused us: one line holding SmtpAnswered and
// SmtpBlocked, so the sums of one period divide into the blocked share.
func (e *EMF) SMTPAnswer(egress, provider string, blocked bool) {
	vs := []emfValue{{SmtpAnswered, "Count", 1}, {SmtpBlocked, "Count", boolValue(blocked)}}
	e.writeLine(vs, false, "egress", egress, "provider", provider)
}

// EgressCheck emits one self-check's findings for egress, as evs serve's
// gauges say them, each also with no dimension for the alarms on any
// egress; the egress name is an exit's host, never credentials.
func (e *EMF) EgressCheck(egress string, c verify.EgressCheck) {
	for _, l := range c.Blocklists {
		if l.Error != "" {
			// A list that refused us or did not answer says nothing:
			// neither listed nor clean.
			continue
		}
		e.writeLine([]emfValue{{EgressListed, "None", boolValue(l.Listed)}}, true, "egress", egress, "list", l.Zone)
	}
	if c.HELO != nil {
		e.writeLine([]emfValue{{EgressHELOConfirmed, "None", boolValue(c.HELO.OK)}}, true, "egress", egress)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// CacheRequest counts one result-cache lookup (cache.Cache.Count).
func (e *EMF) CacheRequest(result string) { e.write(CacheRequests, "Count", 1, "result", result) }

// DomainFact counts one lookup of the domain facts (cache.FactsConfig.Count).
func (e *EMF) DomainFact(result string) { e.write(DomainFacts, "Count", 1, "result", result) }

// Calls counts every call api.Observe saw under its route template (never
// the raw path: a call no route matched is "unmatched").
func Calls(o Observer) func(c *api.Call, end time.Time) {
	return func(c *api.Call, end time.Time) {
		route := cmp.Or(c.Route, "unmatched")
		o.HTTPRequest(route, c.Status, end.Sub(c.Start))
	}
}
