package server_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/server"
)

// TestHonestMetrics scrapes /metrics of a real server: test-mode verdicts
// are counted under mode="test" and add nothing to the SMTP series; a live
// verification whose mail host refuses the connection is an SMTP
// connection failure; store faults are counted where they are seen — the
// readiness probe, the batch worker and an API call.
func TestHonestMetrics(t *testing.T) {
	m := server.NewPrometheus(nil)
	o := options{server: func(o *server.Options) { o.Metrics = m }}
	fs := faulty(&o)
	h := start(t, o)
	ms := httptest.NewServer(m.Handler())
	t.Cleanup(ms.Close)
	scrape := func() string {
		t.Helper()
		resp, err := http.Get(ms.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	value := func(body, series string) float64 {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}

	// A test-mode verdict whose made-up evidence is a 550.
	if r := h.do(req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"team+rejected-email@x.example","mode":"full"}`}); r.status != 200 {
		t.Fatalf("test-mode verify: %d %s", r.status, r.body)
	}
	// A live one whose only mail host takes no connection.
	h.dns.AddRecord("down.example. 300 IN MX 10 mx.down.example.")
	h.dns.AddRecord("mx.down.example. 300 IN A 127.0.0.3")
	if r := h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"alice@down.example","mode":"full"}`}); r.status != 200 || !strings.Contains(string(r.body), `"smtp_unreachable"`) {
		t.Fatalf("live verify of an unreachable host: %d %s", r.status, r.body)
	}
	body := scrape()
	if v := value(body, `evs_verifications_total{mode="test",reason="rejected_email",status="undeliverable"}`); v != 1 {
		t.Errorf("test-mode verdicts under mode=\"test\": %v, want 1\n%s", v, body)
	}
	if strings.Contains(body, "\nevs_smtp_replies_total{") {
		t.Errorf("SMTP replies counted though no live RCPT was answered:\n%s", body)
	}
	if v := value(body, `evs_smtp_connection_failures_total{result="unreachable"}`); v != 1 {
		t.Errorf("SMTP connection failures: %v, want 1\n%s", v, body)
	}

	// Store faults: the batch is made while its items cannot be read.
	fs.Down.Store(true)
	b := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":["accepted_email@x.example"]}`})
	if b.status != 201 {
		t.Fatalf("create batch: %d %s", b.status, b.body)
	}
	id := decodeEnvelope(t, b).Request.ID
	fs.ReadsDown.Store(true)
	if r := h.do(req{path: "/v1/requests/" + id, key: h.testKey}); r.status != 503 || r.errorCode(t) != "unavailable" {
		t.Fatalf("a read the store fails: %d %s", r.status, r.body)
	}
	fs.ReadsDown.Store(false)
	if r := h.do(req{path: server.ReadyPath}); r.status != 503 {
		t.Fatalf("/readyz with the store down: %d", r.status)
	}
	waitFor(t, "the batch worker's store fault to be counted", func() bool {
		return value(scrape(), `evs_store_errors_total{source="batch"}`) >= 1
	})
	body = scrape()
	for _, series := range []string{`evs_store_errors_total{source="readyz"}`, `evs_store_errors_total{source="api"}`} {
		if v := value(body, series); v < 1 {
			t.Errorf("%s: %v, want at least 1\n%s", series, v, body)
		}
	}
	fs.Down.Store(false)
}
