package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/evs"
)

// Prometheus is the Observer of `evs serve`: the contract's metrics plus
// the Go runtime and process collectors, on a registry of its own so that
// no library's global registration leaks into /app.
type Prometheus struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	verdicts *prometheus.CounterVec
	replies  *prometheus.CounterVec
	dns      prometheus.Histogram
	hooks    *prometheus.CounterVec
	connFail *prometheus.CounterVec
	storeErr *prometheus.CounterVec
	cache    *prometheus.CounterVec
	facts    *prometheus.CounterVec
	answered *prometheus.CounterVec
	blocked  *prometheus.CounterVec
}

// NewPrometheus returns the metrics; pending, when not nil, is read at each
// scrape for evs_batch_addresses_pending, so the gauge is never stale.
func NewPrometheus(pending func(ctx context.Context) (int, error)) *Prometheus {
	m := &Prometheus{reg: prometheus.NewRegistry()}
	reg := promauto.With(m.reg)
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return reg.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m.requests = counter(app.HttpRequests, "HTTP replies by route template and status code.", "route", "code")
	m.duration = reg.NewHistogramVec(prometheus.HistogramOpts{
		Name: app.HttpRequestDuration, Help: "Time to answer, by route template.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20},
	}, []string{"route"})
	m.verdicts = counter(app.Verifications, "Verdicts by mode (full, quick; test for test-mode accounts), status and reason.", "mode", "status", "reason")
	m.replies = counter(app.SmtpReplies, "RCPT replies by class (2xx, 4xx, 5xx).", "class")
	m.dns = reg.NewHistogram(prometheus.HistogramOpts{
		Name: app.DnsLookupDuration, Help: "Time of mail-domain DNS lookups (MX, then A/AAAA).",
		Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2, 5},
	})
	m.hooks = counter(app.WebhookDeliveries, "Webhook delivery attempts by result (delivered, retry, failed).", "result")
	m.connFail = counter(app.SmtpConnectionFailures, "Live verifications whose SMTP stage got no reply: no host took the connection, or it failed or timed out first.", "result")
	m.storeErr = counter(app.StoreErrors, "Store operations that failed, by who saw it (api, batch, readyz).", "source")
	m.cache = counter(app.CacheRequests, "Result-cache lookups of live verdicts by result (hit, miss, stale).", "result")
	m.facts = counter(app.DomainFacts, "Lookups of a domain's accept-all answer in the shared domain facts, by result (hit, miss).", "result")
	// The counts the AWS functions emit (EMF), beside the share evs serve
	// shows itself (evs_smtp_blocked_share).
	m.answered = counter(app.SmtpAnswered, "Live verdicts whose SMTP stage got a reply, by egress (the direct one or a SOCKS exit) and provider.", "egress", "provider")
	m.blocked = counter(app.SmtpBlocked, "Live verdicts whose SMTP reply was a refusal of us (reason blocked), by egress and provider.", "egress", "provider")
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if pending != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: app.BatchAddressesPending, Help: "Addresses of queued and running batches without a result yet.",
		}, func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			n, err := pending(ctx)
			if err != nil {
				return -1
			}
			return float64(n)
		}))
	}
	return m
}

// watchDisk adds the disk's gauges, read at scrape time: the data
// directory's free bytes, and 1 while they are below min.
func (m *Prometheus) watchDisk(free func() (uint64, error), min int64) {
	read := func() (float64, bool) {
		n, err := free()
		return float64(n), err == nil
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "evs_disk_free_bytes", Help: "Free bytes of the data directory's file system (-1 when unreadable).",
	}, func() float64 {
		if n, ok := read(); ok {
			return n
		}
		return -1
	}), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "evs_disk_below_watermark", Help: "1 while the data directory has less free space than EVS_MIN_FREE_BYTES: /readyz answers 503 and new uploads, batches and exports are refused.",
	}, func() float64 {
		if n, ok := read(); ok && min > 0 && n < float64(min) {
			return 1
		}
		return 0
	}))
}

// Handler serves the registry at /metrics, in the text exposition format.
func (m *Prometheus) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	return mux
}

// SMTPAnswer counts one live verdict with an SMTP reply through egress to
// provider's servers, and whether it was a refusal of us
// (verify.WatchEgress's counted).
func (m *Prometheus) SMTPAnswer(egress, provider string, blocked bool) {
	m.answered.WithLabelValues(egress, provider).Inc()
	c := m.blocked.WithLabelValues(egress, provider)
	if blocked {
		c.Inc()
	}
}

// HTTPRequest implements Observer.
func (m *Prometheus) HTTPRequest(route string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}

// Verification implements Observer.
func (m *Prometheus) Verification(mode evs.Mode, status evs.Status, reason evs.Reason) {
	m.verdicts.WithLabelValues(string(mode), string(status), string(reason)).Inc()
}

// SMTPReply implements Observer.
func (m *Prometheus) SMTPReply(class string) { m.replies.WithLabelValues(class).Inc() }

// DNSLookup implements Observer.
func (m *Prometheus) DNSLookup(d time.Duration) { m.dns.Observe(d.Seconds()) }

// WebhookDelivery implements Observer.
func (m *Prometheus) WebhookDelivery(result string) { m.hooks.WithLabelValues(result).Inc() }

// SMTPConnectionFailure implements Observer.
func (m *Prometheus) SMTPConnectionFailure(result string) { m.connFail.WithLabelValues(result).Inc() }

// StoreError implements Observer.
func (m *Prometheus) StoreError(source string) { m.storeErr.WithLabelValues(source).Inc() }

// CacheRequest counts one result-cache lookup (cache.Cache.Count).
func (m *Prometheus) CacheRequest(result string) { m.cache.WithLabelValues(result).Inc() }

// DomainFact counts one lookup of the domain facts (cache.FactsConfig.Count).
func (m *Prometheus) DomainFact(result string) { m.facts.WithLabelValues(result).Inc() }
