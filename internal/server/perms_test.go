//go:build unix

package server_test

import (
	"os"
	"strings"
	"testing"
)

// TestWarnsOnOpenDataDir: `evs serve` on a data directory other users can
// read says so at start, naming the directory and the fix, and its
// database is private all the same.
func TestWarnsOnOpenDataDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h := start(t, options{dir: dir})
	var found bool
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, "data directory "+dir+" is accessible to other users") &&
			strings.Contains(line, "chmod 700") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no start-up warning about the open data directory; logs:\n%s", h.logs.String())
	}
	fi, err := os.Stat(dir + "/evs.db")
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("evs.db: %v %v, want mode 0600", fi.Mode(), err)
	}
}
