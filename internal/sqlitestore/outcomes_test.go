package sqlitestore

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
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
