package store_test

import (
	"cmp"
	"slices"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// listed is one batch of the listing tests: its ID and when it was created,
// relative to base.
type listed struct {
	id  string
	at  time.Duration
	exp time.Duration // lifetime; 0 means a day
}

// listingBatches are acct-1's batches of the listing tests, in creation
// order. Three share base+1s and two base+2s, so IDs must break ties; the
// two that expire after an hour come first in the list while they live.
var listingBatches = []listed{
	{id: "list-01", at: 0},
	{id: "list-02", at: time.Second},
	{id: "list-03", at: time.Second},
	{id: "list-09", at: time.Second, exp: time.Hour},
	{id: "list-04", at: time.Second},
	{id: "list-05", at: 2 * time.Second},
	{id: "list-06", at: -time.Second},
	{id: "list-07", at: 2 * time.Second},
	{id: "list-08", at: 3 * time.Second, exp: time.Hour},
}

// listingOrder is acct-1's list once list-08 and list-09 have expired:
// CreatedAt descending, then ID descending.
var listingOrder = []string{"list-07", "list-05", "list-04", "list-03", "list-02", "list-01", "list-06"}

// createListing stores listingBatches for acct-1 and one newer batch of
// acct-2, then moves the clock past the short-lived ones' expiry.
func (e *env) createListing(t *testing.T) map[string]evs.Batch {
	t.Helper()
	made := map[string]evs.Batch{}
	for i, l := range listingBatches {
		b, items := newBatch(l.id, "acct-1", 2+i, i%2)
		b.CreatedAt = base.Add(l.at)
		b.ExpiresAt = base.Add(cmp.Or(l.exp, 24*time.Hour))
		must(t, e.st.CreateBatch(e.ctx, b, items), "CreateBatch "+l.id)
		made[l.id] = b
	}
	other, items := newBatch("list-99", "acct-2", 3, 0)
	other.CreatedAt = base.Add(5 * time.Second)
	must(t, e.st.CreateBatch(e.ctx, other, items), "CreateBatch of acct-2")
	made[other.ID] = other
	e.clock.Set(base.Add(2 * time.Hour))
	return made
}

// listAll pages through the account's list with limit, from after, and
// returns the IDs in the order read. Every page but the last is full.
func (e *env) listAll(t *testing.T, accountID string, after evs.BatchPos, limit int) []string {
	t.Helper()
	var ids []string
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatalf("ListBatches(limit %d) did not end after 100 pages: %q", limit, ids)
		}
		page, err := e.st.ListBatches(e.ctx, accountID, after, limit)
		must(t, err, "ListBatches")
		if len(page) > limit {
			t.Fatalf("ListBatches(limit %d) returned %d batches", limit, len(page))
		}
		for _, b := range page {
			ids = append(ids, b.ID)
		}
		if len(page) < limit {
			return ids
		}
		after = evs.PosOf(page[len(page)-1])
	}
}

func runListing(t *testing.T, newStore storeFactory) {
	t.Run("NewestFirstWholeBatches", func(t *testing.T) {
		e := newEnv(t, newStore)
		made := e.createListing(t)
		// A state change does not move a batch in the list.
		b := e.transition(t, made["list-04"], evs.StateRunning, "", base.Add(time.Hour))
		made["list-04"] = e.transition(t, b, evs.StateCancelled, "", base.Add(time.Hour))
		page, err := e.st.ListBatches(e.ctx, "acct-1", evs.BatchPos{}, 100)
		must(t, err, "ListBatches")
		var ids []string
		for _, b := range page {
			ids = append(ids, b.ID)
			sameBatch(t, "listed "+b.ID, b, made[b.ID])
		}
		if !slices.Equal(ids, listingOrder) {
			t.Errorf("ListBatches = %q, want %q", ids, listingOrder)
		}
	})

	t.Run("PagingAcrossTies", func(t *testing.T) {
		e := newEnv(t, newStore)
		e.createListing(t)
		for _, limit := range []int{1, 2, 3, 6, 7, 8, 1000} {
			if got := e.listAll(t, "acct-1", evs.BatchPos{}, limit); !slices.Equal(got, listingOrder) {
				t.Errorf("paging with limit %d = %q, want %q", limit, got, listingOrder)
			}
		}
	})

	// A position stays valid when the batch it names is gone (expired):
	// the next page starts after the place, not after the batch.
	t.Run("PositionOfExpiredBatch", func(t *testing.T) {
		e := newEnv(t, newStore)
		e.createListing(t)
		after := evs.BatchPos{CreatedAt: base.Add(time.Second), ID: "list-09"}
		if got, want := e.listAll(t, "acct-1", after, 2), listingOrder[2:]; !slices.Equal(got, want) {
			t.Errorf("after expired list-09 = %q, want %q", got, want)
		}
	})

	t.Run("CreatedWhilePaging", func(t *testing.T) {
		e := newEnv(t, newStore)
		e.createListing(t)
		first, err := e.st.ListBatches(e.ctx, "acct-1", evs.BatchPos{}, 2)
		must(t, err, "ListBatches")
		newer, items := newBatch("list-00", "acct-1", 2, 0)
		newer.CreatedAt = e.clock.Now()
		must(t, e.st.CreateBatch(e.ctx, newer, items), "CreateBatch while paging")
		var got []string
		for _, b := range first {
			got = append(got, b.ID)
		}
		got = append(got, e.listAll(t, "acct-1", evs.PosOf(first[len(first)-1]), 2)...)
		if !slices.Equal(got, listingOrder) {
			t.Errorf("paging while a batch is created = %q, want %q", got, listingOrder)
		}
		want := append([]string{"list-00"}, listingOrder...)
		if got := e.listAll(t, "acct-1", evs.BatchPos{}, 3); !slices.Equal(got, want) {
			t.Errorf("listing again = %q, want %q", got, want)
		}
	})

	t.Run("OtherAccountsAndExpiry", func(t *testing.T) {
		e := newEnv(t, newStore)
		e.createListing(t)
		for _, c := range []struct {
			acct string
			want []string
		}{
			{"acct-2", []string{"list-99"}},
			{"acct-3", nil},
			{"", nil},
		} {
			if got := e.listAll(t, c.acct, evs.BatchPos{}, 5); !slices.Equal(got, c.want) {
				t.Errorf("list of %q = %q, want %q", c.acct, got, c.want)
			}
		}
		// Before the short-lived two expire they are listed in their place;
		// once every batch has expired the list is empty.
		e.clock.Set(base.Add(time.Hour - time.Millisecond))
		want := []string{"list-08", "list-07", "list-05", "list-09", "list-04", "list-03", "list-02", "list-01", "list-06"}
		if got := e.listAll(t, "acct-1", evs.BatchPos{}, 4); !slices.Equal(got, want) {
			t.Errorf("list before expiry = %q, want %q", got, want)
		}
		e.clock.Set(base.Add(25 * time.Hour))
		for _, acct := range []string{"acct-1", "acct-2"} {
			if got := e.listAll(t, acct, evs.BatchPos{}, 5); len(got) != 0 {
				t.Errorf("list of %s after every batch expired = %q, want none", acct, got)
			}
		}
	})
}
