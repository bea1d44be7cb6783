package cache_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/cache"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/store"
)

// countingStore is a real SQLite store that counts the reads reaching it
// and fails writes while failing is set.
type countingStore struct {
	*sqlitestore.Store
	reads   atomic.Int64
	failing atomic.Bool
}

func (c *countingStore) CachedDecision(ctx context.Context, account string, mode evs.Mode, address string) (evs.Decision, time.Time, bool, error) {
	c.reads.Add(1)
	return c.Store.CachedDecision(ctx, account, mode, address)
}

func (c *countingStore) KeepDecisions(ctx context.Context, account string, es []store.CacheEntry) error {
	if c.failing.Load() {
		return errors.New("disk full")
	}
	return c.Store.KeepDecisions(ctx, account, es)
}

func openCounting(tb testing.TB) *countingStore {
	tb.Helper()
	st, err := sqlitestore.Open(context.Background(), tb.TempDir(), time.Now)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return &countingStore{Store: st}
}

var memNow = time.Now().UTC().Truncate(time.Millisecond)

func entry(addr string) store.CacheEntry {
	return store.CacheEntry{
		Decision: evs.Decision{Email: addr, Normalized: addr, Mode: evs.ModeFull, Reason: evs.ReasonAcceptedEmail, CheckedAt: evs.Time{Time: memNow},
			Checks: evs.Checks{SMTP: evs.SMTPCheck{Result: evs.SMTPAccepted, Code: 250, EnhancedCode: "2.1.5", Host: "mx.corp.example"}}},
		ExpiresAt: memNow.Add(time.Hour),
	}
}

// TestVerdictMemory: what the front answers itself and what it leaves to the
// store, against a real SQLite store.
func TestVerdictMemory(t *testing.T) {
	ctx := context.Background()
	read := func(t *testing.T, m *cache.VerdictMemory, account, addr string) (evs.Decision, bool) {
		t.Helper()
		d, exp, found, err := m.CachedDecision(ctx, account, evs.ModeFull, addr)
		if err != nil {
			t.Fatal(err)
		}
		if found && !exp.Equal(memNow.Add(time.Hour)) {
			t.Fatalf("expiry %v, want %v", exp, memNow.Add(time.Hour))
		}
		return d, found
	}
	t.Run("a kept entry is answered without reading the store, as the store holds it", func(t *testing.T) {
		st := openCounting(t)
		m := cache.NewVerdictMemory(st, 0)
		if err := m.KeepDecisions(ctx, "a", []store.CacheEntry{entry("x@corp.example")}); err != nil {
			t.Fatal(err)
		}
		got, found := read(t, m, "a", "x@corp.example")
		if !found || st.reads.Load() != 0 {
			t.Fatalf("found %v after %d store reads, want found after 0", found, st.reads.Load())
		}
		want, _, _, err := st.Store.CachedDecision(ctx, "a", evs.ModeFull, "x@corp.example")
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Fatalf("memory answered\n%+v\nthe store holds\n%+v", got, want)
		}
	})
	t.Run("an entry from before a restart is read once from the store", func(t *testing.T) {
		st := openCounting(t)
		if err := st.Store.KeepDecisions(ctx, "a", []store.CacheEntry{entry("x@corp.example")}); err != nil {
			t.Fatal(err)
		}
		m := cache.NewVerdictMemory(st, 0)
		for range 3 {
			if _, found := read(t, m, "a", "x@corp.example"); !found {
				t.Fatal("not found")
			}
		}
		if n := st.reads.Load(); n != 1 {
			t.Fatalf("%d store reads, want 1", n)
		}
	})
	t.Run("another account never gets the entry", func(t *testing.T) {
		st := openCounting(t)
		m := cache.NewVerdictMemory(st, 0)
		if err := m.KeepDecisions(ctx, "a", []store.CacheEntry{entry("x@corp.example")}); err != nil {
			t.Fatal(err)
		}
		if _, found := read(t, m, "b", "x@corp.example"); found {
			t.Fatal("account b read account a's entry")
		}
	})
	t.Run("a failed write leaves memory to the store", func(t *testing.T) {
		st := openCounting(t)
		m := cache.NewVerdictMemory(st, 0)
		if err := m.KeepDecisions(ctx, "a", []store.CacheEntry{entry("x@corp.example")}); err != nil {
			t.Fatal(err)
		}
		st.failing.Store(true)
		newer := entry("x@corp.example")
		newer.Decision.Reason = evs.ReasonRejectedEmail
		if err := m.KeepDecisions(ctx, "a", []store.CacheEntry{newer}); err == nil {
			t.Fatal("the store's failure was not returned")
		}
		got, found := read(t, m, "a", "x@corp.example")
		if st.reads.Load() != 1 || !found || got.Reason != evs.ReasonAcceptedEmail {
			t.Fatalf("after a failed write: %d store reads, found %v, reason %s; want the store's entry (accepted_email) read from the store", st.reads.Load(), found, got.Reason)
		}
	})
	t.Run("bounded: the least recently used entry goes", func(t *testing.T) {
		st := openCounting(t)
		m := cache.NewVerdictMemory(st, 2)
		for _, a := range []string{"1@corp.example", "2@corp.example", "3@corp.example"} {
			if err := m.KeepDecisions(ctx, "a", []store.CacheEntry{entry(a)}); err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range []string{"2@corp.example", "3@corp.example", "1@corp.example"} {
			if _, found := read(t, m, "a", a); !found {
				t.Fatalf("%s not found", a)
			}
		}
		if n := st.reads.Load(); n != 1 {
			t.Fatalf("%d store reads, want 1 (the evicted entry)", n)
		}
	})
}

// BenchmarkVerdictMemory: a hit from memory beside the same read from SQLite,
// and the heap an entry costs.
func BenchmarkVerdictMemory(b *testing.B) {
	ctx := context.Background()
	st := openCounting(b)
	const n = 10_000
	var es []store.CacheEntry
	for i := range n {
		es = append(es, entry(fmt.Sprintf("user%d@corp.example", i)))
	}
	if err := st.Store.KeepDecisions(ctx, "a", es); err != nil {
		b.Fatal(err)
	}
	b.Run("sqlite", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, _, ok, err := st.Store.CachedDecision(ctx, "a", evs.ModeFull, es[i%n].Decision.Normalized); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("memory", func(b *testing.B) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		m := cache.NewVerdictMemory(st, n)
		if err := m.KeepDecisions(ctx, "a", es); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perEntry := float64(after.HeapAlloc-before.HeapAlloc) / n
		for i := 0; b.Loop(); i++ {
			if _, _, ok, err := m.CachedDecision(ctx, "a", evs.ModeFull, es[i%n].Decision.Normalized); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
		// Reported after the loop, which resets the benchmark's metrics.
		b.ReportMetric(perEntry, "B/entry")
		runtime.KeepAlive(m)
	})
}
