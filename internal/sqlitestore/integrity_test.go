//go:build unix

package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
)

// copyFiles copies the named files of src that exist into a new directory.
func copyFiles(t *testing.T, src string, names ...string) string {
	t.Helper()
	dst := t.TempDir()
	for _, n := range names {
		in, err := os.Open(filepath.Join(src, n))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(filepath.Join(dst, n), os.O_WRONLY|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		out.Close()
	}
	return dst
}

// crashed returns a data directory as a serving store leaves it when it is
// killed after a write: a copy of its files taken while it runs (every
// acknowledged write is in them, the WAL holding what evs.db does not).
func crashed(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlitestore.OpenServing(ctx, dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateAccount(ctx, evs.Account{ID: "a", Name: "owner", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return copyFiles(t, dir, sqlitestore.FileName, sqlitestore.FileName+"-wal", sqlitestore.RunningName)
}

// TestMissingWALAfterCrashRefused: after an unclean stop the write-ahead
// log holds writes no other file has; with it deleted, opening refuses
// with one line naming the file and the repair instead of silently
// serving without those writes. With the log there, the writes are back.
func TestMissingWALAfterCrashRefused(t *testing.T) {
	ctx := context.Background()
	dir := crashed(t)
	if err := os.Remove(filepath.Join(dir, sqlitestore.FileName+"-wal")); err != nil {
		t.Fatal(err)
	}
	for name, open := range map[string]func(context.Context, string, func() time.Time) (*sqlitestore.Store, error){
		"OpenServing": sqlitestore.OpenServing, "Open": sqlitestore.Open,
	} {
		st, err := open(ctx, dir, time.Now)
		if err == nil {
			st.Close()
			t.Fatalf("%s served a database whose log was deleted after a crash", name)
		}
		msg := err.Error()
		t.Log(msg)
		if !errors.Is(err, sqlitestore.ErrDamaged) || strings.Contains(msg, "\n") ||
			!strings.Contains(msg, filepath.Join(dir, sqlitestore.FileName+"-wal")+" is missing") ||
			!strings.Contains(msg, "backup") || !strings.Contains(msg, "delete "+filepath.Join(dir, sqlitestore.RunningName)) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// The operator accepts the loss: the store opens with what evs.db has.
	if err := os.Remove(filepath.Join(dir, sqlitestore.RunningName)); err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.OpenServing(ctx, dir, time.Now)
	if err != nil {
		t.Fatalf("after the marker was deleted: %v", err)
	}
	st.Close()
}

// TestWALAfterCrashRecovered: with the log in place, a crashed directory
// opens with its writes, also after a command (Open) read it first and the
// log was folded into evs.db; and a clean stop leaves nothing to complain
// about.
func TestWALAfterCrashRecovered(t *testing.T) {
	ctx := context.Background()
	for _, first := range []string{"OpenServing", "Open, then OpenServing"} {
		t.Run(first, func(t *testing.T) {
			dir := crashed(t)
			if first != "OpenServing" {
				st, err := sqlitestore.Open(ctx, dir, time.Now)
				if err != nil {
					t.Fatal(err)
				}
				st.Close()
				if _, err := os.Stat(filepath.Join(dir, sqlitestore.FileName+"-wal")); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the log is still there after a clean close (%v): this case tests nothing", err)
				}
			}
			for range 2 { // the second start follows a clean stop
				st, err := sqlitestore.OpenServing(ctx, dir, time.Now)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := st.Account(ctx, "a"); err != nil {
					t.Errorf("the write in the log is lost: %v", err)
				}
				if err := st.Close(); err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(filepath.Join(dir, sqlitestore.RunningName)); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("a clean stop left %s (%v)", sqlitestore.RunningName, err)
				}
			}
		})
	}
}

// TestDamagedDatabaseRefused: a database with a damaged page is refused at
// open with one line naming the file and the repair (.recover), not
// served until a query happens to touch the page.
func TestDamagedDatabaseRefused(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlitestore.Open(ctx, dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		if err := st.CreateAccount(ctx, evs.Account{ID: fmt.Sprint("acct-", i), Name: fmt.Sprint("name-", i), CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, sqlitestore.FileName)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	if fi.Size() < 20*page {
		t.Fatalf("evs.db is %d bytes; the test needs pages in the middle to damage", fi.Size())
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The head of a page in the middle: its b-tree page header.
	if _, err := f.WriteAt([]byte(strings.Repeat("\xa5", 64)), (fi.Size()/page/2)*page); err != nil {
		t.Fatal(err)
	}
	f.Close()
	st, err = sqlitestore.OpenServing(ctx, dir, time.Now)
	if err == nil {
		st.Close()
		t.Fatal("a damaged database was opened")
	}
	msg := err.Error()
	t.Log(msg)
	if !errors.Is(err, sqlitestore.ErrDamaged) || strings.Contains(msg, "\n") || !strings.Contains(msg, path+" is damaged") ||
		!strings.Contains(msg, "sqlite3 "+path+" .recover") || !strings.Contains(msg, "backup") {
		t.Errorf("error: %v", err)
	}
}
