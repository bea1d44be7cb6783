//go:build unix

package sqlitestore_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
)

// TestDataFilesPrivate: the database and its -wal and -shm files are
// readable by their owner only (they hold webhook secrets and every
// tenant's addresses), under the usual umask 022 that made them 0644.
func TestDataFilesPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.Open(context.Background(), dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A write, so the WAL and its index exist.
	if err := st.CreateAccount(context.Background(), evs.Account{ID: "a", Name: "a", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{sqlitestore.FileName, sqlitestore.FileName + "-wal", sqlitestore.FileName + "-shm"} {
		fi, err := os.Stat(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m != 0o600 {
			t.Errorf("%s has mode %04o, want 0600", n, m)
		}
	}
	if w := st.Warnings(); len(w) != 0 {
		t.Errorf("warnings on a private directory: %q", w)
	}
}

// TestDataFilesTightened: a database an older build left 0644 in a
// directory others can read is made 0600 at open, and both are reported.
func TestDataFilesTightened(t *testing.T) {
	dir := t.TempDir()
	st, err := sqlitestore.Open(context.Background(), dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	db := filepath.Join(dir, sqlitestore.FileName)
	if err := os.Chmod(db, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	st, err = sqlitestore.Open(context.Background(), dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if fi, err := os.Stat(db); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("evs.db after open: %v %v, want mode 0600", fi.Mode(), err)
	}
	w := strings.Join(st.Warnings(), "\n")
	if !strings.Contains(w, db+" was readable by other users (mode 0644)") {
		t.Errorf("no warning names the tightened file: %q", w)
	}
	if !strings.Contains(w, "data directory "+dir+" is accessible to other users (mode 0755)") || !strings.Contains(w, "chmod 700 "+dir) {
		t.Errorf("no warning names the open directory and the fix: %q", w)
	}
}
