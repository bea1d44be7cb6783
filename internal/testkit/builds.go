package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// Builds are the binaries a test package builds (go build) and runs: each
// is built once, by the first test that asks for it, and shared by the
// others, which would otherwise each link their own copy. Remove them from
// TestMain once the tests have run. The zero value is ready to use.
type Builds struct {
	mu   sync.Mutex
	dir  string
	bins map[string]*built
}

type built struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

// Build returns the path of the binary called name, building it the first
// time with the command cmd returns for its output path. A failed build
// fails every test that asks for the binary, with the build's output.
func (b *Builds) Build(tb testing.TB, name string, cmd func(out string) *exec.Cmd) string {
	tb.Helper()
	b.mu.Lock()
	if b.bins == nil {
		b.bins = map[string]*built{}
	}
	if b.dir == "" {
		d, err := os.MkdirTemp("", "evs-test-builds-")
		if err != nil {
			b.mu.Unlock()
			tb.Fatal(err)
		}
		b.dir = d
	}
	bin, ok := b.bins[name]
	if !ok {
		// A directory each, so that the binary keeps its base name.
		bin = &built{path: filepath.Join(b.dir, strconv.Itoa(len(b.bins)), filepath.Base(name))}
		b.bins[name] = bin
	}
	b.mu.Unlock()
	bin.once.Do(func() {
		if bin.err = os.MkdirAll(filepath.Dir(bin.path), 0o755); bin.err == nil {
			bin.out, bin.err = cmd(bin.path).CombinedOutput()
		}
	})
	if bin.err != nil {
		tb.Fatalf("build %s: %v\n%s", name, bin.err, bin.out)
	}
	return bin.path
}

// Remove deletes the binaries built.
func (b *Builds) Remove() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir != "" {
		os.RemoveAll(b.dir)
		b.dir, b.bins = "", nil
	}
}
