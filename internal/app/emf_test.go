package app_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/app"
)

func TestEMFLines(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	e := &app.EMF{W: &buf, Now: func() time.Time { return time.UnixMilli(1700000000123) }}
	start := time.UnixMilli(1700000000000)
	app.Calls(e)(&api.Call{Route: "/v1/requests/{id}", Status: 404, Start: start}, start.Add(5*time.Millisecond))
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

// An exit's health verdict that takes it out counts under its name and
// under no dimension (the "any exit down" alarm); its return is no line.
func TestEMFExitDown(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	e := &app.EMF{W: &buf}
	e.SMTPExit(1, "exit-b.example", true)
	if buf.Len() != 0 {
		t.Fatalf("an exit back in rotation wrote %s", buf.String())
	}
	e.SMTPExit(1, "exit-b.example", false)
	var rec struct {
		AWS struct {
			CloudWatchMetrics []struct {
				Dimensions [][]string
				Metrics    []struct{ Name string }
			}
		} `json:"_aws"`
		Exit  string  `json:"exit"`
		Value float64 `json:"evs_smtp_exit_down_total"`
	}
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	d := rec.AWS.CloudWatchMetrics
	if len(d) != 1 || len(d[0].Dimensions) != 2 || len(d[0].Dimensions[0]) != 1 || d[0].Dimensions[0][0] != "exit" ||
		len(d[0].Dimensions[1]) != 0 || d[0].Metrics[0].Name != app.SmtpExitDown || rec.Exit != "exit-b.example" || rec.Value != 1 {
		t.Errorf("EMF line %s", buf.String())
	}
}

// A counted answer is one line with both counts under its egress and
// provider: answered 1, blocked 1 for a refusal of us and 0 otherwise, so
// that metric math divides sums of one period.
func TestEMFSMTPAnswer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		blocked bool
		want    float64
	}{{true, 1}, {false, 0}} {
		var buf bytes.Buffer
		(&app.EMF{W: &buf}).SMTPAnswer("127.0.0.1:1080", "google", c.blocked)
		var rec struct {
			AWS struct {
				CloudWatchMetrics []struct {
					Dimensions [][]string
					Metrics    []struct{ Name, Unit string }
				}
			} `json:"_aws"`
			Egress   string   `json:"egress"`
			Provider string   `json:"provider"`
			Answered *float64 `json:"evs_smtp_answered_total"`
			Blocked  *float64 `json:"evs_smtp_blocked_total"`
		}
		if err := json.Unmarshal(buf.Bytes(), &rec); err != nil || strings.Count(buf.String(), "\n") != 1 {
			t.Fatalf("%q (%v)", buf.String(), err)
		}
		d := rec.AWS.CloudWatchMetrics
		if len(d) != 1 || len(d[0].Dimensions) != 1 || strings.Join(d[0].Dimensions[0], ",") != "egress,provider" || len(d[0].Metrics) != 2 ||
			d[0].Metrics[0].Name != app.SmtpAnswered || d[0].Metrics[1].Name != app.SmtpBlocked || d[0].Metrics[1].Unit != "Count" ||
			rec.Egress != "127.0.0.1:1080" || rec.Provider != "google" || rec.Answered == nil || *rec.Answered != 1 || rec.Blocked == nil || *rec.Blocked != c.want {
			t.Errorf("blocked %v: EMF line %s", c.blocked, buf.String())
		}
	}
}

// A held EMF (the worker's) sums each kind of count until Flush, or until
// a minute has passed since the oldest; what is not a count (a gauge, a
// duration) is written at once.
func TestEMFHoldSumsCounts(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	now := time.UnixMilli(1700000000000)
	e := &app.EMF{W: &buf, Hold: true, Now: func() time.Time { return now }}
	for range 3 {
		e.SMTPAnswer("direct", "google", false)
		e.DomainFact("hit")
	}
	e.SMTPAnswer("direct", "google", true)
	e.SMTPAnswer("direct", "yahoo", false)
	e.DNSLookup(20 * time.Millisecond)
	if got := strings.Count(buf.String(), "\n"); got != 1 || !strings.Contains(buf.String(), "evs_dns_lookup_duration_seconds") {
		t.Fatalf("before Flush: %d lines, want the duration's alone:\n%s", got, buf.String())
	}
	buf.Reset()
	e.Flush()
	want := []string{
		`"evs_smtp_answered_total":4,"evs_smtp_blocked_total":1,"provider":"google"`,
		`"evs_domain_facts_total":3,"result":"hit"`,
		`"evs_smtp_answered_total":1,"evs_smtp_blocked_total":0,"provider":"yahoo"`,
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("Flush wrote %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d = %s, want it to hold %s", i, lines[i], w)
		}
	}
	buf.Reset()
	e.Flush()
	if buf.Len() != 0 {
		t.Fatalf("a second Flush wrote %s", buf.String())
	}
	// Held a minute: the next count writes them all.
	e.DomainFact("miss")
	now = now.Add(time.Minute)
	e.DomainFact("miss")
	if !strings.Contains(buf.String(), `"evs_domain_facts_total":2`) {
		t.Fatalf("after a minute held: %q", buf.String())
	}
}
