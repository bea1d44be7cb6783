// Package prom is the Prometheus face of package metrics for `evs serve`:
// the contract's metrics (section 11) plus the Go runtime and process
// collectors, served in the text exposition format at /metrics. Only
// `evs serve` links it; the Lambda functions use metrics.EMF.
package prom

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/metrics"
)

// Metrics is a metrics.Observer on its own registry.
type Metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	verdicts *prometheus.CounterVec
	replies  *prometheus.CounterVec
	dns      prometheus.Histogram
	hooks    *prometheus.CounterVec
}

// New returns the metrics; pending, when not nil, is read at each scrape
// for evs_batch_addresses_pending.
func New(pending func(ctx context.Context) (int, error)) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.HTTPRequests, Help: "HTTP replies by route template and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metrics.HTTPRequestDuration, Help: "Time to answer, by route template.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20},
		}, []string{"route"}),
		verdicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.Verifications, Help: "Verdicts by mode, status and reason.",
		}, []string{"mode", "status", "reason"}),
		replies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.SMTPReplies, Help: "RCPT replies by class (2xx, 4xx, 5xx).",
		}, []string{"class"}),
		dns: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metrics.DNSLookupDuration, Help: "Time of mail-domain DNS lookups (MX, then A/AAAA).",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2, 5},
		}),
		hooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metrics.WebhookDeliveries, Help: "Webhook delivery attempts by result (delivered, retry, failed).",
		}, []string{"result"}),
	}
	m.reg.MustRegister(m.requests, m.duration, m.verdicts, m.replies, m.dns, m.hooks,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if pending != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: metrics.BatchAddressesPending, Help: "Addresses of queued and running batches without a result yet.",
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

// Handler serves the registry at /metrics.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	return mux
}

// HTTPRequest implements metrics.Observer.
func (m *Metrics) HTTPRequest(route string, code int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}

// Verification implements metrics.Observer.
func (m *Metrics) Verification(mode evs.Mode, status evs.Status, reason evs.Reason) {
	m.verdicts.WithLabelValues(string(mode), string(status), string(reason)).Inc()
}

// SMTPReply implements metrics.Observer.
func (m *Metrics) SMTPReply(class string) { m.replies.WithLabelValues(class).Inc() }

// DNSLookup implements metrics.Observer.
func (m *Metrics) DNSLookup(d time.Duration) { m.dns.Observe(d.Seconds()) }

// WebhookDelivery implements metrics.Observer.
func (m *Metrics) WebhookDelivery(result string) { m.hooks.WithLabelValues(result).Inc() }
