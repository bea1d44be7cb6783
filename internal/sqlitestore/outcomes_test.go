package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// TestBackupKeepsOutcomes: `evs backup` copies the reported outcomes with
// the rest of the database (contract, section 18: covered by backup and
// restore), expiry included.
func TestBackupKeepsOutcomes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	now := func() time.Time { return t0 }
	s, err := OpenServing(ctx, dir, now)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	o := evs.Outcome{Address: "bob@example.com", Kind: evs.OutcomeBounced, BounceType: evs.BounceHard, At: t0.Add(-time.Hour),
		SMTPReply: "550 5.1.1 no such user", Verdict: evs.Risky, Score: 60}
	if n, err := s.PutOutcomes(ctx, "a", []evs.Outcome{o}, t0.Add(24*time.Hour)); err != nil || n != 1 {
		t.Fatalf("PutOutcomes = %d, %v", n, err)
	}
	dest := filepath.Join(t.TempDir(), "copy")
	if err := Backup(ctx, dir, dest); err != nil {
		t.Fatal(err)
	}
	c, err := Open(ctx, dest, now)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.AddressOutcomes(ctx, "a", []string{"bob@example.com"})
	if err != nil || len(got["bob@example.com"]) != 1 || got["bob@example.com"][0] != o {
		t.Fatalf("the copy holds %+v, %v; want %+v", got, err, o)
	}
	// The copy keeps the expiry: a day later the outcome is gone there too.
	later, err := Open(ctx, dest, func() time.Time { return t0.Add(24 * time.Hour) })
	if err != nil {
		t.Fatal(err)
	}
	defer later.Close()
	if got, err := later.AddressOutcomes(ctx, "a", []string{"bob@example.com"}); err != nil || len(got) != 0 {
		t.Fatalf("after the expiry the copy gives %+v, %v", got, err)
	}
}

// TestMigrateCountsStoredOutcomes: the migration that adds the per-domain
// counts counts the addresses of the outcomes stored before it, each once
// per class, by the domain after its last "@" and the month its first
// outcome of the class expires in; the next shares those whose outcomes
// carry the account's verdict (store.SharesOutcome).
func TestMigrateCountsStoredOutcomes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	// The schema just before the counts.
	before := -1
	for i, m := range migrations {
		if m == outcomeDomainsSchema {
			before = i
		}
	}
	if before < 0 {
		t.Fatal("no migration creates outcome_domains")
	}
	for _, m := range migrations[:before] {
		if _, err := db.ExecContext(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	long, short := millis(t0.Add(300*24*time.Hour)), millis(t0.Add(time.Hour))
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, before)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO outcomes (account_id, address, at, kind, bounce_type, verdict, expires_at) VALUES
		('a', 'ann@catchall.example', 1, 'delivered', '', '', ?),
		('a', 'ann@catchall.example', 2, 'delivered', '', 'risky', ?),
		('a', '"x@y"@catchall.example', 1, 'bounced', 'hard', '', ?),
		('a', 'bob@catchall.example', 2, 'bounced', 'hard', 'deliverable', ?),
		('a', 'cy@catchall.example', 1, 'bounced', 'soft', 'deliverable', ?),
		('a', 'cy@catchall.example', 2, 'complained', '', '', ?),
		('b', 'dee@catchall.example', 1, 'delivered', '', '', ?)`, long, long, long, short, long, long, long); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := openStore(t, dir, func() time.Time { return t0 })
	c := func(dl, hb int) evs.DomainCounts { return evs.DomainCounts{Delivered: dl, HardBounces: hb} }
	if got, err := s.DomainCounts(ctx, "a", []string{"catchall.example", "y\"@catchall.example"}, false); err != nil ||
		len(got) != 1 || got["catchall.example"] != c(1, 2) {
		t.Fatalf("account a's migrated counts = %+v, %v", got, err)
	}
	// Only ann's delivery and bob's bounce carry a verdict: dee's, x@y's
	// and cy's do not (cy's soft bounce is not counted at all).
	if got, err := s.DomainCounts(ctx, "a", []string{"catchall.example"}, true); err != nil || got["catchall.example"] != c(1, 1) {
		t.Fatalf("shared migrated counts = %+v, %v", got, err)
	}
	// The short-lived bounce is in an earlier bucket, which ends first.
	s.now = func() time.Time { return store.DomainBucket(t0.Add(time.Hour)) }
	if got, err := s.DomainCounts(ctx, "a", []string{"catchall.example"}, false); err != nil || got["catchall.example"] != c(1, 1) {
		t.Fatalf("account a's counts after the first bucket = %+v, %v", got, err)
	}
}

// TestServingReadsOutcomesOfEarlierRuns: the serving store skips the
// history reads of accounts without outcomes, so the accounts whose
// outcomes an earlier run stored must be read back at open; an account
// with none reads as none.
func TestServingReadsOutcomesOfEarlierRuns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	now := func() time.Time { return t0 }
	o := evs.Outcome{Address: "bob@example.com", Kind: evs.OutcomeBounced, BounceType: evs.BounceHard, At: t0.Add(-time.Hour)}
	for _, acct := range []string{"a", "c", "b"} {
		s, err := OpenServing(ctx, dir, now)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutOutcomes(ctx, acct, []evs.Outcome{o}, t0.Add(24*time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s, err := OpenServing(ctx, dir, now)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, acct := range []string{"a", "b", "c"} {
		got, err := s.AddressOutcomes(ctx, acct, []string{"bob@example.com"})
		if err != nil || len(got["bob@example.com"]) != 1 {
			t.Errorf("account %s after a restart: %+v, %v; want its outcome", acct, got, err)
		}
		counts, err := s.DomainCounts(ctx, acct, []string{"example.com"}, false)
		if err != nil || counts["example.com"].HardBounces != 1 {
			t.Errorf("account %s's domain counts after a restart: %+v, %v", acct, counts, err)
		}
	}
	if got, err := s.AddressOutcomes(ctx, "d", []string{"bob@example.com"}); err != nil || len(got) != 0 {
		t.Errorf("an account without outcomes: %+v, %v", got, err)
	}
}
