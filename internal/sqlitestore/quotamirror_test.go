package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
)

// The serving store decides charges from memory and writes them behind:
// what it charged and refunded is in the table once it is closed, for the
// next server (and for a store opened beside it); the sweep forgets an
// expired counter in memory as in the table.
func TestQuotaMirrorPersists(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clk := testkit.NewClock(t0)
	exp := t0.Add(time.Hour)
	charge := func(s *Store, n int) bool {
		t.Helper()
		ok, err := s.ChargeAddresses(ctx, "a", "p", n, 10, exp)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	serve := func() *Store {
		t.Helper()
		s, err := OpenServing(ctx, dir, clk.Now)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := serve()
	if s.quota == nil {
		t.Fatal("a serving store without its quota mirror")
	}
	if !charge(s, 4) || !charge(s, 5) || charge(s, 2) {
		t.Fatal("charges of 4 and 5 of 10 must pass, and then 2 not")
	}
	if err := s.RefundAddresses(ctx, "a", "p", 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// 6 used: both a store beside a server and the next server see it.
	for _, s := range []*Store{openStore(t, dir, clk.Now), serve()} {
		if !charge(s, 4) || charge(s, 1) {
			t.Fatalf("after reopening (exclusive %v): 6 of 10 must be used", s.Exclusive())
		}
		if err := s.RefundAddresses(ctx, "a", "p", 4); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	// Swept once expired: a fresh counter, in memory too.
	s = serve()
	defer s.Close()
	if charge(s, 5) {
		t.Fatal("6 of 10 used: 5 more must be refused")
	}
	clk.Set(exp)
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if !charge(s, 10) {
		t.Fatal("an expired counter was not forgotten")
	}
}
