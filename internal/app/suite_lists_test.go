package app_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestSuiteListsAsSpreadsheetsExportThem: a CSV list as Excel on Windows
// saves it ("CSV UTF-8": a BOM, CR LF) comes back with its BOM and line
// ends; an address repeated in other case is a duplicate; a phone number
// keeps its "+" while a formula is guarded; a quoted address followed by
// text is that row's invalid_syntax, not another address (the row itself
// reads as a spreadsheet reads it). A list whose
// columns show no address, or a column number past its rows, is a 400
// that says so.
func TestSuiteListsAsSpreadsheetsExportThem(t *testing.T) {
	t.Parallel()
	forEachDeployment(t, suiteOptions{}, func(t *testing.T, s *suite) {
		_, key := s.account(t, true)
		csvCall := func(query, body string) reply {
			return s.do(t, key, httpCall{method: http.MethodPost, path: "/v1/requests?mode=quick" + query, body: body,
				headers: map[string]string{"Content-Type": "text/csv"}})
		}
		list := "\ufeffemail;name;phone\r\n" +
			"ALICE@Example.com;Alice;+1 555 0100\r\n" +
			"alice@example.com;Alice again;-5\r\n" +
			"carol@example.com;=SUM(A1);\r\n" +
			"\"dave@example.com\"junk;Dave;\r\n"
		r := csvCall("", list)
		if r.status != http.StatusCreated {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		id := decodeEnvelope(t, r).Request.ID
		s.final(t, key, id)
		var counters struct {
			Counters struct{ Total, Duplicates int } `json:"counters"`
		}
		if e := s.do(t, key, httpCall{path: "/v1/requests/" + id}); json.Unmarshal(e.body, &counters) != nil || counters.Counters.Total != 4 || counters.Counters.Duplicates != 1 {
			t.Fatalf("batch %s; want 4 rows, the second Alice a duplicate", e.body)
		}
		got := s.do(t, key, httpCall{path: "/v1/requests/" + id + "/results", headers: map[string]string{"Accept": "text/csv"}})
		if got.status != http.StatusOK || !bytes.HasPrefix(got.body, []byte("\ufeffemail;")) && !bytes.HasPrefix(got.body, []byte("\ufeffemail,")) {
			t.Fatalf("results: %d %q; want the list's BOM first", got.status, got.body)
		}
		if n, crlf := bytes.Count(got.body, []byte("\n")), bytes.Count(got.body, []byte("\r\n")); n != 5 || crlf != n {
			t.Errorf("results: %d lines, %d ending CR LF; want 5, all CR LF:\n%q", n, crlf, got.body)
		}
		recs, err := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(got.body, []byte("\ufeff")))).ReadAll()
		if err != nil {
			t.Fatalf("results CSV: %v", err)
		}
		col := map[string]int{}
		for i, h := range recs[0] {
			col[h] = i
		}
		row := func(i int, name string) string { return recs[i][col[name]] }
		for _, c := range []struct {
			row         int
			field, want string
		}{
			{1, "phone", "+1 555 0100"},
			{2, "phone", "-5"},
			{2, "evs_duplicate_of_line", "2"},
			{3, "name", "'=SUM(A1)"},
			{4, "evs_reason", "invalid_syntax"},
		} {
			if g := row(c.row, c.field); g != c.want {
				t.Errorf("row %d, %s: %q, want %q", c.row, c.field, g, c.want)
			}
		}

		for _, c := range []struct{ query, body, want string }{
			{"", "Name;Firma\nHans;ACME\n", `"Name", "Firma"`},
			{"&column=99", "Name;Firma\nHans;hans@example.com\n", "no column 99"},
		} {
			r := csvCall(c.query, c.body)
			var e struct {
				Error struct{ Message string } `json:"error"`
			}
			_ = json.Unmarshal(r.body, &e)
			if r.status != http.StatusBadRequest || !strings.Contains(e.Error.Message, c.want) || !strings.Contains(e.Error.Message, "column") {
				t.Errorf("%q%s: %d %s; want 400 naming %s", c.body, c.query, r.status, r.body, c.want)
			}
		}
	})
}
