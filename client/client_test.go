package client_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/client"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
)

// serve starts a real evs serve on loopback, on a store of its own with a
// test-mode account, and returns a strict client with that account's key.
func serve(t *testing.T, rateLimit float64) (*client.Client, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := sqlitestore.Open(ctx, freshStoreDir(t), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	key, err := server.Bootstrap(ctx, st, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{RateLimit: rateLimit, AuthTTL: time.Minute, Retention: 24 * time.Hour, SMTP: config.SMTPOff}
	srv, err := server.New(server.Options{Config: cfg, Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		st.Close()
	})
	base := "http://" + ln.Addr().String()
	c := client.New(base, key)
	c.Poll = 50 * time.Millisecond
	client.Strict(c)
	return c, base
}

func TestVerify(t *testing.T) {
	c, _ := serve(t, 0)
	ctx := context.Background()
	for _, tc := range []struct{ email, status, reason string }{
		{"accepted_email@x.example", "deliverable", "accepted_email"},
		{"rejected_email@x.example", "undeliverable", "rejected_email"},
		{"not an address", "undeliverable", "invalid_syntax"},
	} {
		v, err := c.Verify(ctx, tc.email, "quick")
		if err != nil {
			t.Fatalf("%s: %v", tc.email, err)
		}
		if v.Status != tc.status || v.Decision.Reason != tc.reason || v.Decision.Email != tc.email || v.RequestID == "" {
			t.Errorf("%s: %s/%s %+v", tc.email, v.Status, v.Decision.Reason, v)
		}
	}
}

func TestErrorsCarryTheEnvelope(t *testing.T) {
	c, base := serve(t, 0)
	bad := client.New(base, "evs_nope")
	_, err := bad.Verify(context.Background(), "a@x.example", "")
	var e *client.Error
	if !errors.As(err, &e) || e.Status != http.StatusUnauthorized || e.Code != "unauthorized" || e.RequestID == "" {
		t.Fatalf("bad key: %v", err)
	}
	if strings.Contains(err.Error(), "evs_nope") {
		t.Fatalf("the error echoes the key: %v", err)
	}
	if _, err := c.Batch(context.Background(), "00000000-0000-4000-8000-000000000000"); !errors.As(err, &e) || e.Code != "not_found" {
		t.Fatalf("unknown batch: %v", err)
	}
}

// TestRetriesWhatIsRefusedForNow: at one call a second (a burst of 2),
// ten calls in a row all succeed: each 429 is waited out by its
// Retry-After and sent again.
func TestRetriesWhatIsRefusedForNow(t *testing.T) {
	c, _ := serve(t, 1)
	for i := range 10 {
		if _, err := c.Verify(context.Background(), fmt.Sprintf("accepted_email@d%d.example", i), "quick"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}

// TestBatchJobs: a JSON list and a CSV list (a body, then through an
// upload) are made, waited for with progress, read page by page and
// downloaded as CSV, the same rows either way.
func TestBatchJobs(t *testing.T) {
	c, _ := serve(t, 0)
	ctx := context.Background()
	var emails []string
	for i := range 1500 {
		local := []string{"accepted_email", "rejected_email", "accept_all"}[i%3]
		emails = append(emails, fmt.Sprintf("%s@d%d.example", local, i))
	}

	b, err := c.CreateBatch(ctx, emails, client.BatchOptions{Mode: "quick", Name: "json list"})
	if err != nil {
		t.Fatal(err)
	}
	checkBatch(t, c, b, emails, "json list", nil)

	var sb strings.Builder
	sb.WriteString("name;E-Mail\n")
	for i, e := range emails {
		fmt.Fprintf(&sb, "Person %d;%s\n", i, e)
	}
	list := []byte(sb.String())
	b, err = c.CreateBatchCSV(ctx, list, client.BatchOptions{Mode: "quick", Name: "csv body"})
	if err != nil {
		t.Fatal(err)
	}
	checkBatch(t, c, b, emails, "csv body", []string{"name", "E-Mail"})

	c.MaxBody = 1 << 10 // the list goes through an upload
	b, err = c.CreateBatchCSV(ctx, list, client.BatchOptions{Mode: "quick", Name: "upload", Column: "e-mail", Delimiter: "semicolon"})
	if err != nil {
		t.Fatal(err)
	}
	checkBatch(t, c, b, emails, "upload", []string{"name", "E-Mail"})
}

// checkBatch waits for b and reads its results every way. header is a CSV
// list's: its CSV download is then the list's rows, verdicts appended,
// and layout=results the one row per address a JSON list gives.
func checkBatch(t *testing.T, c *client.Client, b *client.Batch, emails []string, name string, header []string) {
	t.Helper()
	ctx := context.Background()
	if b.Request.Name != name || b.Counters.Total != len(emails) {
		t.Fatalf("%s: created %+v", name, b)
	}
	seen := 0
	final, err := c.Wait(ctx, b.Request.ID, func(p client.Batch) {
		if p.Counters.Processed < seen {
			t.Errorf("%s: progress went back: %d after %d", name, p.Counters.Processed, seen)
		}
		seen = p.Counters.Processed
	})
	if err != nil {
		t.Fatal(err)
	}
	if final.Request.State != "completed" || seen != len(emails) {
		t.Fatalf("%s: final %+v, progress saw %d", name, final, seen)
	}
	var got []string
	for r, err := range c.Results(ctx, b.Request.ID, client.Filter{}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Email)
	}
	if strings.Join(got, ",") != strings.Join(emails, ",") {
		t.Fatalf("%s: %d results, not the list in its order", name, len(got))
	}
	n := 0
	for r, err := range c.Results(ctx, b.Request.ID, client.Filter{Status: "undeliverable"}) {
		if err != nil || r.Status != "undeliverable" {
			t.Fatalf("%s: filtered result %+v %v", name, r, err)
		}
		n++
	}
	if n != final.Counters.Undeliverable || n == 0 {
		t.Fatalf("%s: %d undeliverable results, counters say %d", name, n, final.Counters.Undeliverable)
	}
	download := func(f client.Filter) [][]string {
		t.Helper()
		var buf bytes.Buffer
		if err := c.DownloadCSV(ctx, b.Request.ID, f, &buf); err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(&buf).ReadAll()
		if err != nil || len(rows) != len(emails)+1 {
			t.Fatalf("%s: CSV of %d rows (%v): %q", name, len(rows), err, rows[:min(len(rows), 2)])
		}
		return rows
	}
	perAddress := func(rows [][]string) {
		t.Helper()
		if rows[0][0] != "email" || rows[1][0] != emails[0] || rows[len(rows)-1][0] != emails[len(emails)-1] {
			t.Fatalf("%s: CSV %q", name, rows[:2])
		}
	}
	if header == nil {
		perAddress(download(client.Filter{}))
		return
	}
	rows := download(client.Filter{})
	last := rows[len(rows)-1]
	if !slices.Equal(rows[0][:len(header)], header) || rows[0][len(header)] != "evs_status" || rows[1][1] != emails[0] ||
		last[0] != fmt.Sprintf("Person %d", len(emails)-1) || last[len(header)+1] != "accept_all" {
		t.Fatalf("%s: the list's rows %q ... %q", name, rows[:2], last)
	}
	perAddress(download(client.Filter{Layout: "results"}))
}

// TestListAndCancel: the batch list pages through every batch, newest
// first, filtered by state; a cancelled batch is listed as such and a
// second cancel is refused with the contract's code.
func TestListAndCancel(t *testing.T) {
	c, _ := serve(t, 0)
	ctx := context.Background()
	var made []string
	for i := range 3 {
		b, err := c.CreateBatch(ctx, []string{fmt.Sprintf("greylisted@d%d.example", i)}, client.BatchOptions{Name: fmt.Sprint("batch ", i)})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, b.Request.ID)
	}
	cancelled, err := c.Cancel(ctx, made[1])
	if err != nil {
		t.Fatal(err)
	}
	if cancelled.Request.State != "cancelled" {
		t.Fatalf("cancel: %+v", cancelled.Request)
	}
	var apiErr *client.Error
	if _, err := c.Cancel(ctx, made[1]); !errors.As(err, &apiErr) || apiErr.Code != "invalid_state" {
		t.Fatalf("second cancel: %v", err)
	}
	var all []string
	for b, err := range c.Batches(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b.Request.ID)
	}
	if want := []string{made[2], made[1], made[0]}; !slices.Equal(all, want) {
		t.Errorf("list %v, want newest first %v", all, want)
	}
	var only []string
	for b, err := range c.Batches(ctx, "cancelled") {
		if err != nil {
			t.Fatal(err)
		}
		only = append(only, b.Request.ID)
	}
	if !slices.Equal(only, []string{made[1]}) {
		t.Errorf("cancelled batches %v, want %v", only, made[1:2])
	}
	for _, err := range c.Batches(ctx, "asleep") {
		if !errors.As(err, &apiErr) || apiErr.Code != "invalid_request" {
			t.Errorf("an unknown state: %v", err)
		}
	}
}

// TestOutcomes: outcomes reported through the client change the next
// verdict, show in the report, count as duplicates when sent again, and
// are forgotten on delete.
func TestOutcomes(t *testing.T) {
	c, _ := serve(t, 0)
	ctx := context.Background()
	const email = "accepted_email@bounced.example"
	if v, err := c.Verify(ctx, email, ""); err != nil || v.Status != "deliverable" {
		t.Fatalf("before: %+v %v", v, err)
	}
	sent := []client.Outcome{
		{Email: email, Outcome: "bounced", BounceType: "hard", At: time.Now().Add(time.Minute), SMTPReply: "550 5.1.1 no such user"},
		{Email: "accepted_email@other.example", Outcome: "delivered", At: time.Now()},
	}
	got, err := c.ReportOutcomes(ctx, sent)
	if err != nil || got.Received != 2 || got.Accepted != 2 || got.Duplicates != 0 {
		t.Fatalf("report: %+v %v", got, err)
	}
	if got, err := c.ReportOutcomes(ctx, sent); err != nil || got.Accepted != 0 || got.Duplicates != 2 {
		t.Fatalf("again: %+v %v", got, err)
	}
	v, err := c.Verify(ctx, email, "")
	if err != nil || v.Decision.Reason != "known_bounce" || v.Decision.Checks.History == nil {
		t.Fatalf("after a hard bounce: %+v %v", v, err)
	}
	rep, err := c.Report(ctx)
	if err != nil || rep.Outcomes != 2 || len(rep.Rows) == 0 {
		t.Fatalf("report: %+v %v", rep, err)
	}
	hard := 0
	for _, r := range rep.Rows {
		hard += r.HardBounces
	}
	if hard != 1 {
		t.Errorf("report counts %d hard bounces, want 1: %+v", hard, rep.Rows)
	}
	if n, err := c.DeleteOutcomes(ctx, email); err != nil || n != 1 {
		t.Fatalf("delete: %d %v", n, err)
	}
	if v, err := c.Verify(ctx, email, ""); err != nil || v.Decision.Reason != "accepted_email" {
		t.Fatalf("after delete: %+v %v", v, err)
	}
	var apiErr *client.Error
	if _, err := c.ReportOutcomes(ctx, []client.Outcome{{Email: email, Outcome: "lost", At: time.Now()}}); !errors.As(err, &apiErr) || apiErr.Code != "invalid_request" {
		t.Fatalf("a bad outcome: %v", err)
	}
	if s, err := c.Health(ctx); err != nil || s != "ok" {
		t.Fatalf("health: %q %v", s, err)
	}
}

// TestClientCoversTheContract: every operation of api/openapi.yaml is a
// method of Client, or is listed here with why a client does not call it.
func TestClientCoversTheContract(t *testing.T) {
	doc, err := os.ReadFile("../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]string{
		"verify": "Verify", "listBatches": "Batches", "createBatch": "CreateBatch", "getBatch": "Batch",
		"getResults": "Results", "exportResults": "DownloadCSV", "cancelBatch": "Cancel",
		"createUpload": "CreateBatchCSV", "sendUpload": "CreateBatchCSV", "downloadExport": "DownloadCSV",
		"postOutcomes": "ReportOutcomes", "deleteOutcomes": "DeleteOutcomes", "outcomesReport": "Report",
		"health": "Health",
	}
	notForClients := map[string]string{
		"verifyPreflight":   "a browser's CORS preflight",
		"receiveSnsMessage": "Amazon SNS posts it, not a client",
		"ready":             "the operator's readiness detail (egress, blocklists); Health answers whether the service is up",
		"widget":            "a script web pages load by <script src> (docs/widget.md), not an API call",
	}
	ct := reflect.TypeFor[*client.Client]()
	for _, m := range regexp.MustCompile(`(?m)^\s+operationId: (\w+)$`).FindAllStringSubmatch(string(doc), -1) {
		op := m[1]
		if _, ok := notForClients[op]; ok {
			continue
		}
		name, ok := methods[op]
		if !ok {
			t.Errorf("operation %s: no Client method covers it", op)
			continue
		}
		if _, ok := ct.MethodByName(name); !ok {
			t.Errorf("operation %s: Client has no method %s", op, name)
		}
	}
}

// freshStoreDir is a new directory holding a fresh SQLite store's files.
func freshStoreDir(t testing.TB) string {
	return testkit.FreshDir(t, "sqlite", func(d string) (io.Closer, error) {
		return sqlitestore.Open(context.Background(), d, time.Now)
	})
}
