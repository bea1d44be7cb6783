package server_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// listPage is a reply of GET /v1/requests.
type listPage struct {
	Requests   []envelope `json:"requests"`
	NextCursor *string    `json:"nextCursor"`
	RequestID  string     `json:"requestId"`
}

// list reads one page of the batch list with key and query q.
func (h *harness) list(key string, q url.Values) listPage {
	h.t.Helper()
	path := "/v1/requests"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	r := h.do(req{path: path, key: key})
	if r.status != 200 {
		h.t.Fatalf("GET %s: %d %s", path, r.status, r.body)
	}
	var p listPage
	if err := json.Unmarshal(r.body, &p); err != nil || p.Requests == nil {
		h.t.Fatalf("GET %s: not a batch list (%v): %s", path, err, r.body)
	}
	if p.RequestID != r.header.Get("X-Request-Id") {
		h.t.Fatalf("requestId %q != X-Request-Id %q", p.RequestID, r.header.Get("X-Request-Id"))
	}
	return p
}

// listAll pages through the list with limit from cursor ("" for the
// start) and returns the IDs read. Every page but the last is full and
// only the last has a null nextCursor.
func (h *harness) listAll(key string, limit int, cursor string) []string {
	h.t.Helper()
	var ids []string
	for pages := 0; ; pages++ {
		if pages > 50 {
			h.t.Fatalf("list with limit %d did not end after 50 pages", limit)
		}
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		p := h.list(key, q)
		for _, e := range p.Requests {
			ids = append(ids, e.Request.ID)
		}
		if p.NextCursor == nil {
			if len(p.Requests) == 0 && pages > 0 {
				h.t.Errorf("limit %d: an empty last page; the page before should have ended the list", limit)
			}
			return ids
		}
		if len(p.Requests) != limit {
			h.t.Fatalf("limit %d: a page of %d with a nextCursor", limit, len(p.Requests))
		}
		cursor = *p.NextCursor
	}
}

// createQuick creates a one-address batch with key and returns its
// envelope.
func (h *harness) createQuick(key string, n int) envelope {
	h.t.Helper()
	var emails []string
	for i := range n {
		emails = append(emails, fmt.Sprintf("user%d@x.example", i))
	}
	r := h.do(req{method: "POST", path: "/v1/requests", key: key, body: `{"mode":"quick","emails":` + emailsJSON(emails) + `}`})
	if r.status != 201 {
		h.t.Fatalf("create: %d %s", r.status, r.body)
	}
	return decodeEnvelope(h.t, r)
}

func TestListBatches(t *testing.T) {
	h := start(t, options{})
	// Five batches a second apart, then three in the same instant: the
	// list is newest first, the three by ID descending.
	var want []string
	made := map[string]envelope{}
	for i := range 5 {
		e := h.createQuick(h.testKey, i+1)
		made[e.Request.ID] = e
		want = append([]string{e.Request.ID}, want...)
		h.clock.Advance(time.Second)
	}
	var tied []string
	for i := range 3 {
		e := h.createQuick(h.testKey, 10+i)
		made[e.Request.ID] = e
		tied = append(tied, e.Request.ID)
	}
	slices.Sort(tied)
	slices.Reverse(tied)
	want = append(tied, want...)
	other := h.createQuick(h.otherKey, 2)

	t.Run("WholeList", func(t *testing.T) {
		p := h.list(h.testKey, nil)
		var got []string
		for _, e := range p.Requests {
			got = append(got, e.Request.ID)
			c := made[e.Request.ID]
			if e.Request.CreatedAt != c.Request.CreatedAt || e.Request.Mode != "quick" || e.Counters.Total != c.Counters.Total {
				t.Errorf("listed %+v, created %+v", e, c)
			}
			checkInvariants(t, e, nil)
		}
		if !slices.Equal(got, want) || p.NextCursor != nil {
			t.Fatalf("list = %q (nextCursor %v), want %q and null", got, p.NextCursor, want)
		}
	})

	t.Run("Paging", func(t *testing.T) {
		for _, limit := range []int{1, 2, 3, 4, 8, 1000} {
			if got := h.listAll(h.testKey, limit, ""); !slices.Equal(got, want) {
				t.Errorf("limit %d: %q, want %q", limit, got, want)
			}
		}
	})

	// A batch created between two pages is newer than every page's
	// cursor: the rest of the list neither repeats nor skips an old one,
	// and the next listing from the start shows it first.
	t.Run("CreatedWhilePaging", func(t *testing.T) {
		first := h.list(h.testKey, url.Values{"limit": {"3"}})
		h.clock.Advance(time.Second)
		newer := h.createQuick(h.testKey, 1)
		var got []string
		for _, e := range first.Requests {
			got = append(got, e.Request.ID)
		}
		got = append(got, h.listAll(h.testKey, 3, *first.NextCursor)...)
		if !slices.Equal(got, want) {
			t.Errorf("paging across a creation = %q, want %q", got, want)
		}
		want = append([]string{newer.Request.ID}, want...)
		if got := h.listAll(h.testKey, 100, ""); !slices.Equal(got, want) {
			t.Errorf("listing again = %q, want %q", got, want)
		}
	})

	t.Run("OtherAccounts", func(t *testing.T) {
		if got := h.listAll(h.otherKey, 5, ""); !slices.Equal(got, []string{other.Request.ID}) {
			t.Errorf("other account's list = %q, want only %s", got, other.Request.ID)
		}
		if got := h.listAll(h.liveKey, 5, ""); len(got) != 0 {
			t.Errorf("an account without batches lists %q", got)
		}
		// Another account's cursor is only a position in the caller's own
		// list.
		p := h.list(h.testKey, url.Values{"limit": {"1"}})
		if got := h.listAll(h.otherKey, 5, *p.NextCursor); !slices.Equal(got, []string{other.Request.ID}) {
			t.Errorf("other account from the test account's cursor = %q, want only %s", got, other.Request.ID)
		}
	})

	t.Run("Refused", func(t *testing.T) {
		resultsCursor := base64.RawURLEncoding.EncodeToString([]byte(`{"a":3}`))
		tests := []struct {
			name, query string
			status      int
			code        string
		}{
			{"limit 0", "limit=0", 400, "invalid_request"},
			{"limit too big", "limit=1001", 400, "invalid_request"},
			{"limit not a number", "limit=ten", 400, "invalid_request"},
			{"limit empty", "limit=", 400, "invalid_request"},
			{"cursor not base64", "cursor=%25%25", 400, "invalid_request"},
			{"cursor garbage", "cursor=xyz", 400, "invalid_request"},
			{"cursor empty", "cursor=", 400, "invalid_request"},
			{"results cursor", "cursor=" + resultsCursor, 400, "invalid_request"},
			{"unknown parameter", "status=risky", 400, "invalid_request"},
		}
		for _, tt := range tests {
			r := h.do(req{path: "/v1/requests?" + tt.query, key: h.testKey})
			if r.status != tt.status || r.errorCode(t) != tt.code {
				t.Errorf("%s: %d %s, want %d %s", tt.name, r.status, r.body, tt.status, tt.code)
			}
		}
		r := h.do(req{method: "PUT", path: "/v1/requests", key: h.testKey})
		if r.status != 405 || r.errorCode(t) != "method_not_allowed" || r.header.Get("Allow") != "GET, POST" {
			t.Errorf("PUT: %d %v %s", r.status, r.header, r.body)
		}
		r = h.do(req{path: "/v1/requests", body: strings.Repeat(" ", 2048), key: h.testKey})
		if r.status != 413 || r.errorCode(t) != "payload_too_large" {
			t.Errorf("GET with a body: %d %s", r.status, r.body)
		}
		if r := h.do(req{path: "/v1/requests"}); r.status != 401 || r.errorCode(t) != "unauthorized" {
			t.Errorf("no key: %d %s", r.status, r.body)
		}
	})

	t.Run("Expired", func(t *testing.T) {
		h.clock.Advance(31 * 24 * time.Hour)
		if got := h.listAll(h.testKey, 5, ""); len(got) != 0 {
			t.Errorf("after the retention every batch expired, but the list is %q", got)
		}
	})
}
