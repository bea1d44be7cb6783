package server_test

import (
	"context"
	"io"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/server"
)

// TestPrometheusExposition scrapes /metrics after one observation of each
// kind: every contract metric is there under its name and labels, and the
// pending gauge is read at the scrape.
func TestPrometheusExposition(t *testing.T) {
	m := server.NewPrometheus(func(context.Context) (int, error) { return 7, nil })
	m.HTTPRequest("/v1/verify", 200, 3*time.Millisecond)
	m.Verification(evs.ModeQuick, evs.Deliverable, evs.ReasonAcceptedEmail)
	m.SMTPReply("5xx")
	m.DNSLookup(time.Millisecond)
	m.WebhookDelivery("delivered")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`evs_http_requests_total{code="200",route="/v1/verify"} 1`,
		`evs_http_request_duration_seconds_count{route="/v1/verify"} 1`,
		`evs_verifications_total{mode="quick",reason="accepted_email",status="deliverable"} 1`,
		`evs_smtp_replies_total{class="5xx"} 1`,
		`evs_dns_lookup_duration_seconds_count 1`,
		`evs_webhook_deliveries_total{result="delivered"} 1`,
		`evs_batch_addresses_pending 7`,
		`go_goroutines `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

// TestLambdasLeavePrometheusOut keeps the promise of package metrics'
// comment: the Lambda functions, built as `make build` builds them, link no
// client_golang.
func TestLambdasLeavePrometheusOut(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "lambda.norpc", "-deps", "github.com/evs-dev/evs/functions/...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list found %d dependencies", len(deps))
	}
	for _, dep := range deps {
		if strings.HasPrefix(dep, "github.com/prometheus/") {
			t.Errorf("a Lambda links %s", dep)
		}
	}
}
