package sqlitestore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
)

// TestProbeWrite: the probe succeeds while the database takes writes, fails
// as unavailable while another connection holds the write lock (a writer
// that cannot write, as on a full disk), succeeds again once it is let go,
// and fails on a closed store.
func TestProbeWrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openServing(t, dir)
	if err := s.ProbeWrite(ctx); err != nil {
		t.Fatalf("probe of a fresh store: %v", err)
	}

	other, err := sql.Open("sqlite", filepath.Join(dir, sqlitestore.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("take the write lock: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = s.ProbeWrite(short)
	cancel()
	if err == nil || evs.ErrorCode(err) != evs.CodeUnavailable {
		t.Fatalf("probe while another writer holds the lock: %v, want unavailable", err)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := s.ProbeWrite(ctx); err != nil {
		t.Fatalf("probe once the lock is let go: %v", err)
	}
	s.Close()
	if err := s.ProbeWrite(ctx); err == nil {
		t.Fatal("probe of a closed store succeeded")
	}
}

// BenchmarkProbeWrite is the cost of one readiness probe (/readyz makes at
// most one a second).
func BenchmarkProbeWrite(b *testing.B) {
	ctx := context.Background()
	s, err := sqlitestore.OpenServing(ctx, b.TempDir(), time.Now)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for b.Loop() {
		if err := s.ProbeWrite(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
