package server_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/sqlitestore"
)

// heldResults holds every Results read until release is closed, telling
// entered of each: a CSV list being built, for as long as the test wants.
type heldResults struct {
	server.Store
	entered chan struct{}
	release chan struct{}
}

func (s *heldResults) Results(ctx context.Context, accountID, id string, afterSeq, limit int, status evs.Status) ([]evs.Result, error) {
	s.entered <- struct{}{}
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return s.Store.Results(ctx, accountID, id, afterSeq, limit, status)
}

// TestHeavyReadsBounded: a CSV list, an export and the outcomes report
// each hold a store reader for as long as they read, so `evs serve` runs
// a bounded number at once (default 3), two per account: an account's
// third is 429 rate_limited with Retry-After, whichever route it is,
// while another account's goes on; past the server's bound, 503
// unavailable with Retry-After. Once they end, the account may read again
// (contract, section 16).
func TestHeavyReadsBounded(t *testing.T) {
	held := &heldResults{entered: make(chan struct{}, 16), release: make(chan struct{})}
	h := start(t, options{wrapStore: func(s server.Store) server.Store { held.Store = s; return held }})
	var once sync.Once
	free := func() { once.Do(func() { close(held.release) }) }
	t.Cleanup(free)
	batchOf := func(key string) string {
		r := h.do(req{method: "POST", path: "/v1/requests", key: key, body: `{"emails":["accepted_email@x.example"]}`})
		if r.status != 201 {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		id := decodeEnvelope(t, r).Request.ID
		h.poll(key, id, 10*time.Second)
		return id
	}
	mine, theirs := batchOf(h.testKey), batchOf(h.otherKey)
	// The results as text/csv: the list an export stores is built the
	// same way (the wrapped store here keeps no export files).
	list := func(key, id string) reply {
		return h.do(req{path: "/v1/requests/" + id + "/results", key: key, headers: map[string]string{"Accept": "text/csv"}})
	}
	var pending []chan reply
	hold := func(key, id string) {
		t.Helper()
		c := make(chan reply, 1)
		go func() { c <- list(key, id) }()
		select {
		case <-held.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("a list that should have been admitted never read the results")
		}
		pending = append(pending, c)
	}
	hold(h.testKey, mine)
	hold(h.testKey, mine)
	for _, r := range []reply{list(h.testKey, mine), h.do(req{path: "/v1/outcomes/report", key: h.testKey})} {
		if r.status != 429 || r.errorCode(t) != "rate_limited" || r.header.Get("Retry-After") == "" {
			t.Fatalf("an account's third heavy read while two are held: %d %v %s", r.status, r.header, r.body)
		}
	}
	hold(h.otherKey, theirs)
	if r := h.do(req{path: "/v1/outcomes/report", key: h.liveKey}); r.status != 503 || r.errorCode(t) != "unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("a heavy read past the server's bound: %d %v %s", r.status, r.header, r.body)
	}
	free()
	for _, c := range pending {
		if r := <-c; r.status != 200 {
			t.Fatalf("a held list once released: %d %s", r.status, r.body)
		}
	}
	if r := list(h.testKey, mine); r.status != 200 {
		t.Fatalf("a list once the account's first ended: %d %s", r.status, r.body)
	}
}

// scanCounter counts the outcome reports reading the store at once.
type scanCounter struct {
	*sqlitestore.Store
	now, peak atomic.Int64
}

func (s *scanCounter) EachOutcome(ctx context.Context, accountID string, fn func(evs.Outcome) error) error {
	n := s.now.Add(1)
	defer s.now.Add(-1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	return s.Store.EachOutcome(ctx, accountID, fn)
}

// reportOutcomes is how many outcomes TestReportsLeaveReadersToOthers
// stores for the account whose reports hammer the server.
const reportOutcomes = 100_000

// TestReportsLeaveReadersToOthers: sixteen clients of one account ask
// for the report over 100,000 outcomes as fast as they can, while another
// account verifies addresses. At most two reports read at once (the rest
// are 429 with Retry-After), each admitted report counts every outcome,
// and every one of the other account's quick verifications is answered:
// the reports never hold all of the store's readers (contract, section
// 16). Before, with 1.24 M outcomes, such a victim's quick verify took
// 8.7 to 56.6 s.
func TestReportsLeaveReadersToOthers(t *testing.T) {
	scans := &scanCounter{}
	h := start(t, options{wrapStore: func(s server.Store) server.Store {
		scans.Store = s.(*sqlitestore.Store)
		return scans
	}})
	ctx := context.Background()
	at := h.clock.Now().Add(-time.Hour)
	for i := 0; i < reportOutcomes; i += 10_000 {
		os := make([]evs.Outcome, 10_000)
		for j := range os {
			os[j] = evs.Outcome{Address: fmt.Sprintf("u%d@d%d.example", i+j, (i+j)%100), Kind: evs.OutcomeDelivered, At: at}
		}
		if _, err := h.st.PutOutcomes(ctx, h.liveAcct, os, at.Add(24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	_, victim := h.account("victim", false)

	stop := make(chan struct{})
	var served, refused atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := h.do(req{path: "/v1/outcomes/report", key: h.liveKey})
				switch {
				case r.status == 200 && r.json(t)["outcomes"] == float64(reportOutcomes):
					served.Add(1)
				case r.status == 429 && r.header.Get("Retry-After") != "":
					refused.Add(1)
				default:
					t.Errorf("a report: %d %.300s", r.status, r.body)
					return
				}
			}
		}()
	}
	verified := 0
	for i := range 10 {
		r := h.do(req{method: "POST", path: "/v1/verify", key: victim, body: fmt.Sprintf(`{"email":"v%d@good.example","mode":"quick"}`, i)})
		if r.status == 200 {
			verified++
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d reports served, %d refused, at most %d at once; %d of 10 verifications answered", served.Load(), refused.Load(), scans.peak.Load(), verified)
	if verified != 10 {
		t.Errorf("%d of the other account's 10 quick verifications answered, want 10", verified)
	}
	if p := scans.peak.Load(); p > 2 {
		t.Errorf("%d reports of one account read the store at once, want at most 2", p)
	}
	if served.Load() == 0 || refused.Load() == 0 {
		t.Errorf("%d reports served, %d refused: want both", served.Load(), refused.Load())
	}
}
