package sqlitestore_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
)

func openServing(t *testing.T, dir string) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.OpenServing(context.Background(), dir, time.Now)
	if err != nil {
		t.Fatalf("OpenServing: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestOpenServingIsExclusive(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "aix" {
		t.Skip("no flock: OpenServing cannot be exclusive here")
	}
	ctx := context.Background()
	dir := t.TempDir()
	first := openServing(t, dir)
	if !first.Exclusive() {
		t.Fatal("a store opened with OpenServing is not Exclusive")
	}

	second, err := sqlitestore.OpenServing(ctx, dir, time.Now)
	if err == nil {
		second.Close()
		t.Fatal("a second OpenServing of the same directory succeeded while the first is open")
	}
	if !errors.Is(err, sqlitestore.ErrInUse) || err.Error() != "data directory "+dir+" is in use by another evs serve" {
		t.Fatalf("second OpenServing: %q, want ErrInUse naming %s", err, dir)
	}

	// Other commands open the directory beside the server, unhindered,
	// and are not exclusive.
	other, err := sqlitestore.Open(ctx, dir, time.Now)
	if err != nil {
		t.Fatalf("Open beside a serving store: %v", err)
	}
	if other.Exclusive() {
		t.Fatal("a store opened with Open is Exclusive")
	}
	if err := other.CreateAccount(ctx, evs.Account{ID: "a1", Name: "other", CreatedAt: time.Now()}); err != nil {
		t.Fatalf("write beside a serving store: %v", err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	// The refused second start touched nothing of the first one's.
	if err := first.CreateAccount(ctx, evs.Account{ID: "a2", Name: "first", CreatedAt: time.Now()}); err != nil {
		t.Fatalf("the serving store after a refused second start: %v", err)
	}

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	next := openServing(t, dir)
	if n, err := next.CountAccounts(ctx); err != nil || n != 2 {
		t.Fatalf("next server: %d accounts, %v; want 2", n, err)
	}
}

// lockHolderEnv tells a re-executed test binary to hold the serve lock of
// the directory it names until it is killed.
const lockHolderEnv = "EVS_SQLITESTORE_LOCK_DIR"

// TestLockHolderProcess is the child of TestServeLockDiesWithProcess.
func TestLockHolderProcess(t *testing.T) {
	dir := os.Getenv(lockHolderEnv)
	if dir == "" {
		t.Skip("the serving process of TestServeLockDiesWithProcess; runs only when re-executed by it")
	}
	if _, err := sqlitestore.OpenServing(context.Background(), dir, time.Now); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("serving\n")
	sqlitestore.AwaitKill(t)
}

// TestServeLockDiesWithProcess: a server killed with SIGKILL, which closes
// nothing, leaves no lock behind: the next start succeeds at once.
func TestServeLockDiesWithProcess(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "aix" {
		t.Skip("no flock: OpenServing cannot be exclusive here")
	}
	dir := t.TempDir()
	cmd, sc := sqlitestore.StartHelper(t, "TestLockHolderProcess", lockHolderEnv, dir)
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if !sc.Scan() || sc.Text() != "serving" {
		t.Fatalf("the lock holder did not start serving: %q %v", sc.Text(), sc.Err())
	}
	if s, err := sqlitestore.OpenServing(context.Background(), dir, time.Now); !errors.Is(err, sqlitestore.ErrInUse) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("OpenServing while another process serves: %v, want ErrInUse", err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	s := openServing(t, dir)
	if !s.Exclusive() {
		t.Fatal("not Exclusive after the previous server died")
	}
}
