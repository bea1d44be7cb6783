package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/server"
)

// exportLink asks for an export of batch id with the query q and returns
// the path (on this server) of its URL, checking the reply's shape.
func (h *harness) exportLink(key, id, q string) string {
	h.t.Helper()
	r := h.do(req{path: "/v1/requests/" + id + "/export" + q, key: key})
	if r.status != 200 {
		h.t.Fatalf("export%s: %d %s", q, r.status, r.body)
	}
	m := r.json(h.t)
	link, _ := m["url"].(string)
	path, ok := strings.CutPrefix(link, h.base+"/v1/exports/")
	if !ok || !strings.Contains(path, "?token=") {
		h.t.Fatalf("url %q is not this server's export URL", link)
	}
	want := h.clock.Now().Add(15 * time.Minute).UTC().Format("2006-01-02T15:04:05.000Z")
	if m["expiresAt"] != want || m["requestId"] != r.header.Get("X-Request-Id") {
		h.t.Fatalf("export reply %s: want expiresAt %s and the call's requestId", r.body, want)
	}
	return "/v1/exports/" + path
}

// TestExportLink: GET /v1/requests/{id}/export hands out a URL that serves,
// with no API key, exactly the CSV that Accept: text/csv gives for the
// same filters; the filters are checked as the results' are, another
// account's batch is not found, and the URL stops working after 15
// minutes of the store's clock, when the sweep deletes its file.
func TestExportLink(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	emails := []string{"alice@x.example", "rejected_email@x.example", "accept_all@y.example", "=1+1@x.example", "greylisted@x.example", "not an address"}
	id := completedBatch(t, h, emails, "quick")

	var links []string
	for _, q := range []string{"", "?status=undeliverable", "?minScore=50", "?status=risky&minScore=1", "?status=deliverable&minScore=100"} {
		t.Run(q, func(t *testing.T) {
			want := h.do(req{path: "/v1/requests/" + id + "/results" + q, key: h.testKey, headers: map[string]string{"Accept": "text/csv"}})
			if want.status != 200 || !strings.HasPrefix(string(want.body), "email,status,") {
				t.Fatalf("CSV: %d %s", want.status, want.body)
			}
			link := h.exportLink(h.testKey, id, q)
			links = append(links, link)
			got := h.do(req{path: link}) // no key
			if got.status != 200 || string(got.body) != string(want.body) {
				t.Fatalf("export: %d\n%s\nwant the CSV:\n%s", got.status, got.body, want.body)
			}
			if ct := got.header.Get("Content-Type"); ct != "text/csv; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			if cd := got.header.Get("Content-Disposition"); cd != `attachment; filename="`+id+`.csv"` {
				t.Errorf("Content-Disposition %q", cd)
			}
		})
	}

	for _, tc := range []struct {
		name, method, path, key string
		status                  int
		code                    string
	}{
		{"another account's batch", "GET", "/v1/requests/" + id + "/export", h.otherKey, 404, "not_found"},
		{"unknown batch", "GET", "/v1/requests/00000000-0000-4000-8000-000000000000/export", h.testKey, 404, "not_found"},
		{"bad id", "GET", "/v1/requests/nope/export", h.testKey, 400, "invalid_request"},
		{"bad status", "GET", "/v1/requests/" + id + "/export?status=ok", h.testKey, 400, "invalid_request"},
		{"bad minScore", "GET", "/v1/requests/" + id + "/export?minScore=101", h.testKey, 400, "invalid_request"},
		{"unknown parameter", "GET", "/v1/requests/" + id + "/export?limit=5", h.testKey, 400, "invalid_request"},
		{"POST", "POST", "/v1/requests/" + id + "/export", h.testKey, 405, "method_not_allowed"},
		{"no key", "GET", "/v1/requests/" + id + "/export", "", 401, "unauthorized"},
		{"wrong token", "GET", strings.Split(links[0], "?")[0] + "?token=" + strings.Repeat("A", 43), "", 404, "not_found"},
		{"no token", "GET", strings.Split(links[0], "?")[0], "", 404, "not_found"},
		{"not an export ID", "GET", "/v1/exports/..%2F..%2Fevs.db?token=x", "", 404, "not_found"},
		{"PUT to the URL", "PUT", links[0], "", 405, "method_not_allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(req{method: tc.method, path: tc.path, key: tc.key})
			if r.status != tc.status || r.errorCode(t) != tc.code {
				t.Fatalf("%d %s, want %d %s", r.status, r.body, tc.status, tc.code)
			}
		})
	}

	// Downloads are logged under their route and batch, never with the
	// token.
	downloads := 0
	for _, line := range strings.Split(h.logs.String(), "\n") {
		for _, link := range links {
			if token := link[strings.Index(link, "token=")+len("token="):]; strings.Contains(line, token) {
				t.Fatalf("a log line holds an export's token: %s", line)
			}
		}
		var l struct {
			Msg, Route, BatchID string
			Status              int
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "call" && l.Route == "/v1/exports/{id}" && l.Status == 200 {
			if l.BatchID != id {
				t.Errorf("download logged with batch %q: %s", l.BatchID, line)
			}
			downloads++
		}
	}
	if downloads != len(links) {
		t.Errorf("%d downloads logged, want %d", downloads, len(links))
	}

	// A sweep before the expiry keeps the exports.
	if _, err := h.st.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := h.do(req{path: links[0]}); r.status != 200 {
		t.Fatalf("after an early sweep: %d %s", r.status, r.body)
	}
	h.clock.Advance(15*time.Minute + time.Millisecond)
	for _, link := range links {
		if r := h.do(req{path: link}); r.status != 404 || r.errorCode(t) != "not_found" {
			t.Fatalf("expired export: %d %s", r.status, r.body)
		}
	}
	if _, err := h.st.Sweep(context.Background()); err != nil {
		t.Fatal(err)
	}
	left, err := os.ReadDir(filepath.Join(h.dir, "exports"))
	if err != nil || len(left) != 0 {
		t.Fatalf("after the sweep, the exports directory holds %d files (%v)", len(left), err)
	}
}

// TestExportSpansPages: an export of a list longer than a page of results
// (1,000) is written a page at a time and is the same CSV, row for row,
// that Accept: text/csv gives.
func TestExportSpansPages(t *testing.T) {
	h := start(t, options{})
	emails := make([]string, 2500)
	for i := range emails {
		emails[i] = fmt.Sprintf("u%d+accepted_email@d%d.example", i, i%40)
	}
	id := completedBatch(t, h, emails, "quick")
	want := h.do(req{path: "/v1/requests/" + id + "/results", key: h.testKey, headers: map[string]string{"Accept": "text/csv"}})
	got := h.do(req{path: h.exportLink(h.testKey, id, "")})
	if got.status != 200 || string(got.body) != string(want.body) {
		t.Fatalf("export: %d, %d bytes; want the CSV's %d bytes", got.status, len(got.body), len(want.body))
	}
	if n := strings.Count(string(got.body), "\n"); n != len(emails)+1 {
		t.Fatalf("export of %d addresses: %d lines", len(emails), n)
	}
}

// resultsFailAfter fails reading results past the first page while fail
// is set: a store fault in the middle of a streamed list.
type resultsFailAfter struct {
	server.Store
	fail *atomic.Bool
}

func (s resultsFailAfter) Results(ctx context.Context, accountID, id string, after, limit int, status evs.Status) ([]evs.Result, error) {
	if s.fail.Load() && after >= 999 {
		return nil, evs.Errorf(evs.CodeUnavailable, "the disk failed a read")
	}
	return s.Store.Results(ctx, accountID, id, after, limit, status)
}

// TestCSVResultsStreamed: `evs serve` sends a long CSV list as it reads it
// (no Content-Length; TestExportSpansPages holds it to the export's rows);
// a store fault after the list has started cuts the connection, so the
// client never takes part of the list for the whole of it, and the call's
// log line says why.
func TestCSVResultsStreamed(t *testing.T) {
	var fail atomic.Bool
	h := start(t, options{wrapStore: func(s server.Store) server.Store { return resultsFailAfter{s, &fail} }})
	emails := make([]string, 2500)
	for i := range emails {
		emails[i] = fmt.Sprintf("u%d+accepted_email@d%d.example", i, i%40)
	}
	id := completedBatch(t, h, emails, "quick")
	get := func() (*http.Response, []byte, error) {
		rq, _ := http.NewRequest("GET", h.base+"/v1/requests/"+id+"/results", nil)
		rq.Header.Set("X-Api-Key", h.testKey)
		rq.Header.Set("Accept", "text/csv")
		resp, err := http.DefaultClient.Do(rq)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	resp, body, err := get()
	if err != nil || resp.StatusCode != 200 || resp.ContentLength != -1 || strings.Count(string(body), "\n") != len(emails)+1 {
		t.Fatalf("streamed CSV: %v, %d lines (%v)", resp, strings.Count(string(body), "\n"), err)
	}

	fail.Store(true)
	resp, body, err = get()
	if err == nil {
		t.Fatalf("a list cut by a store fault read as whole: %d, %d bytes", resp.StatusCode, len(body))
	}
	waitFor(t, "the cut call's log line", func() bool { return strings.Contains(h.logs.String(), "the disk failed a read") })
}
