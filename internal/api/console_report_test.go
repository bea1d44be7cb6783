package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
)

// postOutcomes reports outcomes as any client does.
func (s stack) postOutcomes(t *testing.T, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.base+"/v1/outcomes", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", s.key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if b, _ := io.ReadAll(res.Body); res.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/outcomes: %d\n%s", res.StatusCode, b)
	}
}

// TestConsoleReportInBrowser: the console's report panel shows what GET
// /v1/outcomes/report says, row for row, and plots each row's bounce
// rate; an account without outcomes is told so. (A test-mode account's
// verdicts are never cached, so its outcomes are all not_verified.)
func TestConsoleReportInBrowser(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	p := openPage(t, s)
	p.useKey(s.key)
	p.step("show the empty report", chromedp.Click(chromedp.ID("report-load")))
	p.waitFor("the empty report", `document.getElementById("report-state").textContent === "No outcomes reported yet."`)
	if !eval[bool](p, `document.getElementById("report").hidden`) {
		t.Error("an empty report shows a table")
	}

	s.postOutcomes(t, `{"outcomes":[
		{"email":"a@x.example","outcome":"delivered","at":"2026-11-20T10:00:00Z"},
		{"email":"b@x.example","outcome":"delivered","at":"2026-11-20T10:00:00Z"},
		{"email":"c@x.example","outcome":"delivered","at":"2026-11-20T10:00:00Z"},
		{"email":"d@x.example","outcome":"bounced","bounceType":"hard","at":"2026-11-20T10:00:00Z"},
		{"email":"e@x.example","outcome":"bounced","bounceType":"soft","at":"2026-11-20T10:00:00Z"},
		{"email":"f@x.example","outcome":"complained","at":"2026-11-20T10:00:00Z"}]}`)
	p.step("show the report", chromedp.Click(chromedp.ID("report-load")))
	p.waitFor("the report", `document.getElementById("report-state").textContent === "6 outcomes reported." && !document.getElementById("report").hidden`)

	var rep struct {
		Outcomes int `json:"outcomes"`
		Rows     []struct {
			Status                                    string
			ScoreBucket                               *string
			Sent, Delivered, HardBounces, SoftBounces int
			Complaints, Deferrals                     int
			BounceRate                                *float64
		} `json:"rows"`
	}
	if err := json.Unmarshal(s.get(t, "/v1/outcomes/report", "application/json"), &rep); err != nil {
		t.Fatal(err)
	}
	var want [][]string
	for _, r := range rep.Rows {
		bucket, rate := "—", "—"
		if r.ScoreBucket != nil {
			bucket = *r.ScoreBucket
		}
		if r.BounceRate != nil {
			rate = fmt.Sprintf("%.1f%%", 100**r.BounceRate)
		}
		want = append(want, []string{r.Status, bucket, fmt.Sprint(r.Sent), fmt.Sprint(r.Delivered), fmt.Sprint(r.HardBounces),
			fmt.Sprint(r.SoftBounces), fmt.Sprint(r.Complaints), fmt.Sprint(r.Deferrals), rate})
	}
	got := eval[[][]string](p, `Array.from(document.querySelectorAll("#report-table tbody tr")).map(function(r){
		return Array.from(r.cells).map(function(c){ return c.textContent.replace(" ", "_"); }); })`)
	if fmt.Sprint(got) != fmt.Sprint(want) || len(want) != 1 || fmt.Sprint(want[0]) != "[not_verified — 5 3 1 1 1 0 20.0%]" {
		t.Errorf("the page's report %v, the API's %v; want one not_verified row, 5 sent, 20.0%%", got, want)
	}
	plot := eval[[]string](p, `Array.from(document.querySelectorAll("#report-chart svg g")).map(function(g){ return g.dataset.label + "=" + g.dataset.rate; })`)
	if fmt.Sprint(plot) != "[not verified=20.0%]" {
		t.Errorf("the plot shows %v, want [not verified=20.0%%]", plot)
	}
	if name := eval[string](p, `document.querySelector("#report-chart svg").getAttribute("aria-label")`); name != "Bounce rate by verdict: not verified 20.0%" {
		t.Errorf("the plot is named %q", name)
	}
	p.shoot("console-report")
	p.done()
}
