package sqlitestore_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
)

// TestOpenReadOnlyDir: a data directory the store cannot write is a start-up
// error naming the directory, not an "unavailable; retry" on the first
// write. /proc/self is a directory no one can create files in, root
// included (root ignores a chmod).
func TestOpenReadOnlyDir(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc, a directory even root cannot write")
	}
	_, err := sqlitestore.Open(context.Background(), "/proc/self", time.Now)
	if err == nil || !strings.Contains(err.Error(), "/proc/self is not writable") {
		t.Fatalf("Open on /proc/self: %v, want a not-writable error naming it", err)
	}
	if evs.ErrorCode(err) == evs.CodeUnavailable {
		t.Fatalf("a read-only directory is reported as unavailable (retry): %v", err)
	}
}
