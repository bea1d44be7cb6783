// Package storedir gives tests the data directory of a fresh SQLite store:
// a copy of one made once per test binary, because making the schema takes
// a second under the race detector and copying it a few writes. It is a
// package of its own, not part of testkit, because the store's own tests
// use testkit.
package storedir

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/sqlitestore"
)

// fresh is the files sqlitestore.Open leaves on an empty directory, by
// path relative to it, read the first time a test asks.
var fresh struct {
	once  sync.Once
	files map[string][]byte
	err   error
}

// SQLite returns a new directory of tb's holding a fresh store's files, as
// sqlitestore.Open leaves them on an empty directory.
func SQLite(tb testing.TB) string {
	tb.Helper()
	fresh.once.Do(func() { fresh.files, fresh.err = made() })
	if fresh.err != nil {
		tb.Fatalf("a fresh store's directory: %v", fresh.err)
	}
	dir := tb.TempDir()
	for rel, b := range fresh.files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// made opens and closes a store on a directory of its own and returns the
// files it left there.
func made() (map[string][]byte, error) {
	d, err := os.MkdirTemp("", "evs-storedir-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(d)
	st, err := sqlitestore.Open(context.Background(), d, time.Now)
	if err != nil {
		return nil, err
	}
	if err := st.Close(); err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	err = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, err := filepath.Rel(d, p)
		if err == nil {
			files[rel], err = os.ReadFile(p)
		}
		return err
	})
	return files, err
}
