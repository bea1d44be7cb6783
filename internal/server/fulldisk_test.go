package server_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/evs-dev/evs/internal/sqlitestore"
)

// fullDisk is a data directory whose space a test takes and gives back.
type fullDisk interface {
	dir() string
	// fill takes all the space left; the server, already started, has
	// what it needed to start.
	fill(t *testing.T)
	// free gives about n pages of 4 KiB back.
	free(t *testing.T, n int)
	// restore gives back all the space, for a restart.
	restore(t *testing.T)
}

// A real full disk under `evs serve`: keyed creations go on while the
// data directory is full, a few pages at a time made free (as a log
// rotated elsewhere on the disk would), so space runs out again at every
// point of a call: before its batch, between the batch and its reply,
// after both. Then space returns, the server restarts on the same
// directory and every key is retried. Each key ends with exactly one
// batch, the one its answers name: no key made two.
//
// The disk is a small tmpfs; where mounting one is not permitted, the
// database itself is capped with PRAGMA max_page_count, which fails the
// same writes with the same SQLITE_FULL. The cap runs as its own case
// too, so both ways are always tested here.
func TestKeyedCreateDiskFull(t *testing.T) {
	t.Parallel() // long, on a harness of its own: it runs beside the others so marked
	for _, kind := range []string{"tmpfs", "max_page_count"} {
		t.Run(kind, func(t *testing.T) {
			var d fullDisk
			if kind == "tmpfs" {
				td, err := newTmpfsDisk(t, 8<<20)
				if err != nil {
					t.Logf("no small file system (%v): capping the database instead", err)
				} else {
					d = td
				}
			}
			if d == nil {
				d = newPageLimitDisk(t, 2000)
			}
			keyedCreatesOnFullDisk(t, d)
		})
	}
}

func keyedCreatesOnFullDisk(t *testing.T, d fullDisk) {
	const keys = 150
	first := &effectStore{}
	h := start(t, options{dir: d.dir(), wrapStore: wrapEffects(first, true)})
	d.fill(t)
	answered := make(map[int]string) // key → the batch a 201 named
	failed := 0
	for i := range keys {
		r := h.createKeyed(h.testKey, fmt.Sprintf("disk-%d", i), keyedBody(i))
		switch {
		case r.status == http.StatusCreated:
			answered[i] = createdID(t, r)
		case r.status >= 500:
			failed++
			d.free(t, 1+i%4)
		default:
			t.Fatalf("creation %d: %d %s", i, r.status, r.body)
		}
	}
	lost := len(first.IDs()) - len(answered)
	if lost == 0 {
		t.Fatalf("%d creations on a full disk, %d refused: none lost its reply after its batch, so the test shows nothing", keys, failed)
	}
	t.Logf("disk full: %d created and answered, %d refused, %d created with the reply lost", len(answered), failed, lost)

	d.restore(t)
	h.stop()
	if err := h.st.Close(); err != nil {
		t.Fatal(err)
	}
	second := &effectStore{}
	h = start(t, options{dir: d.dir(), wrapStore: wrapEffects(second, true)})
	final := make(map[string]int) // batch → key
	for i := range keys {
		r := h.createKeyed(h.testKey, fmt.Sprintf("disk-%d", i), keyedBody(i))
		if r.status != http.StatusCreated && r.status != http.StatusOK {
			t.Fatalf("retry of key %d: %d %s", i, r.status, r.body)
		}
		id := createdID(t, r)
		if prev, ok := answered[i]; ok && id != prev {
			t.Errorf("key %d: first answered %s, now %s", i, prev, id)
		}
		if other, dup := final[id]; dup {
			t.Errorf("keys %d and %d answer the same batch %s", other, i, id)
		}
		final[id] = i
	}
	made := append(first.IDs(), second.IDs()...)
	for _, id := range made {
		if _, ok := final[id]; !ok {
			t.Errorf("batch %s was created but no key answers it: a duplicate", id)
		}
	}
	if len(made) != keys {
		t.Fatalf("%d batches for %d keys, want exactly one each", len(made), keys)
	}
}

// keyedBody is the list of creation i: one address, so batches are small
// and many fit before the disk fills.
func keyedBody(i int) string {
	return fmt.Sprintf(`{"emails":["user%d@good.example"]}`, i)
}

// tmpfsDisk is a tmpfs mounted on the data directory, and a filler file
// that takes what it has left.
type tmpfsDisk struct {
	path string
	f    *os.File
	size int64
}

func newTmpfsDisk(t *testing.T, size int) (*tmpfsDisk, error) {
	d := &tmpfsDisk{path: t.TempDir()}
	if err := d.mount(fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", d.path).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	return d, nil
}

func (d *tmpfsDisk) mount(opts string) error {
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "evs-test", d.path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mount -o %s: %v: %s", opts, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (d *tmpfsDisk) dir() string { return d.path }

func (d *tmpfsDisk) fill(t *testing.T) {
	t.Helper()
	f, err := os.Create(filepath.Join(d.path, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	d.f = f
	chunk := make([]byte, 4096)
	for {
		n, err := f.Write(chunk)
		d.size += int64(n)
		if errors.Is(err, syscall.ENOSPC) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func (d *tmpfsDisk) free(t *testing.T, n int) {
	t.Helper()
	d.size = max(0, d.size-int64(n)*4096)
	if err := d.f.Truncate(d.size); err != nil {
		t.Fatal(err)
	}
}

func (d *tmpfsDisk) restore(t *testing.T) {
	t.Helper()
	if err := d.mount("remount,size=64m"); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(d.f.Close(), os.Remove(d.f.Name())); err != nil {
		t.Fatal(err)
	}
}

// pageCaps holds, by database file, the max_page_count every new
// connection to it gets (a hook of the SQLite driver, which has no other
// way in): the store's own connections and the filler's alike.
var pageCaps struct {
	once sync.Once
	mu   sync.Mutex
	caps map[string]int
}

func capPages(path string, pages int) {
	pageCaps.once.Do(func() {
		pageCaps.caps = make(map[string]int)
		sqlite.RegisterConnectionHook(func(conn sqlite.ExecQuerierContext, dsn string) error {
			file, _, _ := strings.Cut(dsn, "?")
			pageCaps.mu.Lock()
			n, ok := pageCaps.caps[file]
			pageCaps.mu.Unlock()
			if !ok {
				return nil
			}
			_, err := conn.ExecContext(context.Background(), fmt.Sprintf("PRAGMA max_page_count = %d", n), nil)
			return err
		})
	})
	pageCaps.mu.Lock()
	defer pageCaps.mu.Unlock()
	if pages == 0 {
		delete(pageCaps.caps, path)
		return
	}
	pageCaps.caps[path] = pages
}

// pageLimitDisk caps the database at a number of pages; a table of
// page-sized rows takes what the cap leaves.
type pageLimitDisk struct {
	path string
	db   *sql.DB
}

func newPageLimitDisk(t *testing.T, pages int) *pageLimitDisk {
	d := &pageLimitDisk{path: t.TempDir()}
	capPages(filepath.Join(d.path, sqlitestore.FileName), pages)
	t.Cleanup(func() { capPages(filepath.Join(d.path, sqlitestore.FileName), 0) })
	return d
}

func (d *pageLimitDisk) dir() string { return d.path }

func (d *pageLimitDisk) fill(t *testing.T) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(d.path, sqlitestore.FileName)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	d.db = db
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE TABLE test_filler (b BLOB)"); err != nil {
		t.Fatal(err)
	}
	row := make([]byte, 3000) // one row a page
	for {
		_, err := db.Exec("INSERT INTO test_filler (b) VALUES (?)", row)
		var se *sqlite.Error
		if errors.As(err, &se) && se.Code() == sqlite3.SQLITE_FULL {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func (d *pageLimitDisk) free(t *testing.T, n int) {
	t.Helper()
	if _, err := d.db.Exec("DELETE FROM test_filler WHERE rowid IN (SELECT rowid FROM test_filler LIMIT ?)", n); err != nil {
		t.Fatal(err)
	}
}

func (d *pageLimitDisk) restore(t *testing.T) {
	t.Helper()
	capPages(filepath.Join(d.path, sqlitestore.FileName), 0) // new connections: no cap
	if _, err := d.db.Exec("DROP TABLE test_filler"); err != nil {
		t.Fatal(err)
	}
	if err := d.db.Close(); err != nil {
		t.Fatal(err)
	}
}
