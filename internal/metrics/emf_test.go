package metrics_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/metrics"
)

func TestEMFLines(t *testing.T) {
	var buf bytes.Buffer
	e := &metrics.EMF{W: &buf, Now: func() time.Time { return time.UnixMilli(1700000000123) }}
	start := time.UnixMilli(1700000000000)
	metrics.Calls(e)(&api.Call{Route: "/v1/requests/{id}", Status: 404, Start: start}, start.Add(5*time.Millisecond))
	e.WebhookDelivery("failed")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), buf.String())
	}
	var last struct {
		AWS struct {
			Timestamp         int64
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		} `json:"_aws"`
		Result string  `json:"result"`
		Value  float64 `json:"evs_webhook_deliveries_total"`
	}
	if err := json.Unmarshal([]byte(lines[2]), &last); err != nil {
		t.Fatal(err)
	}
	d := last.AWS.CloudWatchMetrics
	if last.AWS.Timestamp != 1700000000123 || len(d) != 1 || d[0].Namespace != "evs" || len(d[0].Dimensions) != 1 ||
		d[0].Dimensions[0][0] != "result" || d[0].Metrics[0].Name != "evs_webhook_deliveries_total" || last.Result != "failed" || last.Value != 1 {
		t.Errorf("EMF line %s", lines[2])
	}
	if !strings.Contains(lines[0], `"route":"/v1/requests/{id}"`) || !strings.Contains(lines[0], `"code":"404"`) || strings.Contains(buf.String(), "abc") {
		t.Errorf("request line %s", lines[0])
	}
}
