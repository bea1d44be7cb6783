package testkit

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// freshDirs holds, by name, the files an open function left on an empty
// directory, made once per test binary (FreshDir).
var freshDirs struct {
	mu    sync.Mutex
	files map[string]map[string][]byte
}

// FreshDir returns a new directory of tb's holding a copy of what open,
// then Close, left on an empty directory the first time this test binary
// asked for name: a fresh SQLite store's schema takes about a second to
// make under the race detector, and copying its files a few writes. The
// store's own packages are the callers' (testkit cannot import them: their
// tests import testkit), so open is theirs:
//
//	dir := testkit.FreshDir(t, "sqlite", func(d string) (io.Closer, error) {
//		return sqlitestore.Open(ctx, d, time.Now)
//	})
func FreshDir(tb testing.TB, name string, open func(dir string) (io.Closer, error)) string {
	tb.Helper()
	freshDirs.mu.Lock()
	files, ok := freshDirs.files[name]
	if !ok {
		var err error
		if files, err = snapshotDir(open); err != nil {
			freshDirs.mu.Unlock()
			tb.Fatalf("a fresh %s directory: %v", name, err)
		}
		if freshDirs.files == nil {
			freshDirs.files = map[string]map[string][]byte{}
		}
		freshDirs.files[name] = files
	}
	freshDirs.mu.Unlock()
	dir := tb.TempDir()
	for rel, b := range files {
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

// snapshotDir runs open and Close on a directory of its own and returns the
// files left there, by path relative to it.
func snapshotDir(open func(dir string) (io.Closer, error)) (map[string][]byte, error) {
	d, err := os.MkdirTemp("", "evs-freshdir-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(d)
	c, err := open(d)
	if err != nil {
		return nil, err
	}
	if err := c.Close(); err != nil {
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
