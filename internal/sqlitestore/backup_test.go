package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// TestBackupWhileWriting copies a served store while a batch is being
// written: the copy opens as a data directory of its own with the
// account, key, webhook secret and batch, and the batch's counters agree
// with its results, as they did at one instant.
func TestBackupWhileWriting(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := OpenServing(ctx, dir, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateAccount(ctx, evs.Account{ID: "a", Name: "acme", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateKey(ctx, evs.Key{Hash: "h1", ID: "k1", AccountID: "a", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutWebhookSecret(ctx, evs.WebhookSecret{AccountID: "a", Current: "whsec_x"}, ""); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	newBatch(t, s, "b1", n, t0.Add(time.Hour))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i += 10 {
			if _, err := s.PutResults(ctx, "a", "b1", resultsFor(i, i+10), t0); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	dest := filepath.Join(t.TempDir(), "copy")
	err = Backup(ctx, dir, dest)
	wg.Wait()
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dest, FileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the copy: %v, %v; want mode 0600", fi, err)
	}
	if fi, err := os.Stat(dest); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the backup directory: %v, %v; want mode 0700", fi, err)
	}
	entries, _ := os.ReadDir(dest)
	if len(entries) != 1 {
		t.Fatalf("the backup directory holds %d files, want evs.db alone", len(entries))
	}

	c, err := OpenServing(ctx, dest, func() time.Time { return t0 })
	if err != nil {
		t.Fatalf("serve the copy: %v", err)
	}
	defer c.Close()
	if k, err := c.KeyByHash(ctx, "h1"); err != nil || k.AccountID != "a" {
		t.Fatalf("key in the copy: %+v, %v", k, err)
	}
	if w, err := c.WebhookSecret(ctx, "a"); err != nil || w.Current != "whsec_x" {
		t.Fatalf("webhook secret in the copy: %+v, %v", w, err)
	}
	b, err := c.Batch(ctx, "a", "b1")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := c.Results(ctx, "a", "b1", -1, n, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != b.Counters.Processed {
		t.Fatalf("the copy has %d results but counts %d processed: not one instant", len(rs), b.Counters.Processed)
	}
	// The copy is its own: writing it leaves the original alone.
	if err := c.PutWebhookSecret(ctx, evs.WebhookSecret{AccountID: "a", Current: "whsec_y"}, "whsec_x"); err != nil {
		t.Fatal(err)
	}
	if w, err := s.WebhookSecret(ctx, "a"); err != nil || w.Current != "whsec_x" {
		t.Fatalf("the original's secret after rotating the copy's: %+v, %v", w, err)
	}
}

// TestBackupRefuses: a destination that holds files, or a data directory
// without a database, is refused and nothing is written.
func TestBackupRefuses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	openStore(t, dir, time.Now)
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "notes"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Backup(ctx, dir, full); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("backup into a directory with files: %v", err)
	}
	if _, err := os.Stat(filepath.Join(full, FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused backup wrote %s (%v)", FileName, err)
	}
	dest := filepath.Join(t.TempDir(), "copy")
	if err := Backup(ctx, t.TempDir(), dest); err == nil {
		t.Fatal("backup of a directory without a database succeeded")
	}
	// An empty directory is a fine destination.
	if err := Backup(ctx, dir, t.TempDir()); err != nil {
		t.Fatalf("backup into an empty directory: %v", err)
	}
}

// writeVersion1 makes dir a data directory of schema version 1 holding one
// batch.
func writeVersion1(t *testing.T, dir string) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		migrations[0],
		`PRAGMA user_version = 1`,
		`INSERT INTO batches (id, account_id, mode, state, created_at, expires_at, items, total, duplicates)
			VALUES ('b1', 'a', 'quick', 'queued', 0, ` + itoa(millis(t0.Add(time.Hour))) + `, 1, 1, 0)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
}

// userVersion reads the schema version of the database file path.
func userVersion(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMigrationKeepsACopy: opening an old database keeps a private copy of
// it, at its old version and with its data, before migrating it; a
// current database is opened without one.
func TestMigrationKeepsACopy(t *testing.T) {
	dir := t.TempDir()
	writeVersion1(t, dir)
	s := openStore(t, dir, func() time.Time { return t0 })
	s.Close()
	bak := filepath.Join(dir, PreMigrationName(1))
	fi, err := os.Stat(bak)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the copy before migration: %v, %v; want mode 0600", fi, err)
	}
	if v := userVersion(t, bak); v != 1 {
		t.Fatalf("the copy has schema version %d, want 1", v)
	}
	if v := userVersion(t, filepath.Join(dir, FileName)); v != len(migrations) {
		t.Fatalf("the database has schema version %d, want %d", v, len(migrations))
	}
	db, _ := sql.Open("sqlite", bak)
	defer db.Close()
	var id string
	if err := db.QueryRow(`SELECT id FROM batches`).Scan(&id); err != nil || id != "b1" {
		t.Fatalf("the copy's batch: %q, %v", id, err)
	}
	// Opened again, current: no other copy.
	openStore(t, dir, time.Now).Close()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".bak") && e.Name() != PreMigrationName(1) || strings.Contains(e.Name(), ".partial-") {
			t.Errorf("unexpected file %s", e.Name())
		}
	}
	// A new directory has nothing to keep.
	fresh := t.TempDir()
	openStore(t, fresh, time.Now)
	if m, _ := filepath.Glob(filepath.Join(fresh, "*.bak")); len(m) != 0 {
		t.Fatalf("a new database was copied: %v", m)
	}
}

// TestOpenDoesNotMigrateUnderAServer: a process that does not serve (evs
// keys) refuses to migrate a database while a server holds the serve
// lock, and leaves it as it was; once the server is gone it migrates.
func TestOpenDoesNotMigrateUnderAServer(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeVersion1(t, dir)
	lock, err := lockDir(dir) // an older evs serve on the directory
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, dir, time.Now)
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "schema version 1") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Open under a server: %v; want ErrInUse naming version 1, one line", err)
	}
	if v := userVersion(t, filepath.Join(dir, FileName)); v != 1 {
		t.Fatalf("the refused Open migrated the database to %d", v)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.bak")); len(m) != 0 {
		t.Fatalf("the refused Open left %v", m)
	}
	lock.Close()
	s := openStore(t, dir, func() time.Time { return t0 })
	if b, err := s.Batch(ctx, "a", "b1"); err != nil || b.State != evs.StateQueued {
		t.Fatalf("migrated batch: %+v, %v", b, err)
	}
	// A current database opens beside a server, as before.
	lock, err = lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	openStore(t, dir, time.Now)
}
