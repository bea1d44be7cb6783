package testkit_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/evs-dev/evs/internal/testkit"
)

// TestConcurrentWrites: lines written from many goroutines all arrive
// whole, which the race detector and the line count check together.
func TestConcurrentWrites(t *testing.T) {
	var b testkit.LogBuffer
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				fmt.Fprintf(&b, "w%d line %d\n", i, j)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 1000 {
		t.Fatalf("%d lines, want 1000", len(lines))
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "w") || !strings.Contains(l, " line ") {
			t.Fatalf("torn line %q", l)
		}
	}
}
