package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/server"
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

// TestCSVListsBounded: CSV lists are built whole in memory, so `evs serve`
// builds a bounded number at once: with a bound of 4, one account builds
// one at a time (its second export is 503 with Retry-After) while another
// account's goes on; once the first ends, the account may export again
// (contract, section 16).
func TestCSVListsBounded(t *testing.T) {
	held := &heldResults{entered: make(chan struct{}, 16), release: make(chan struct{})}
	h := start(t, options{
		server:    func(o *server.Options) { o.CSVLists = 4 },
		wrapStore: func(s server.Store) server.Store { held.Store = s; return held },
	})
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
	export := func(key, id string) reply {
		return h.do(req{path: "/v1/requests/" + id + "/results", key: key, headers: map[string]string{"Accept": "text/csv"}})
	}

	first := make(chan reply, 1)
	go func() { first <- export(h.testKey, mine) }()
	select {
	case <-held.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first list never read the results")
	}
	if r := export(h.testKey, mine); r.status != 503 || r.errorCode(t) != "unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("a second export of one account while its first is built: %d %v %s", r.status, r.header, r.body)
	}
	other := make(chan reply, 1)
	go func() { other <- export(h.otherKey, theirs) }()
	select {
	case <-held.entered: // the other account's list is being built
	case <-time.After(10 * time.Second):
		t.Fatal("another account's export was not let through")
	}
	free()
	for _, c := range []chan reply{first, other} {
		if r := <-c; r.status != 200 {
			t.Fatalf("a held export once released: %d %s", r.status, r.body)
		}
	}
	if r := export(h.testKey, mine); r.status != 200 {
		t.Fatalf("an export once the account's first ended: %d %s", r.status, r.body)
	}
}
