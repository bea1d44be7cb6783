package sqlitestore

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
)

// crashDirEnv tells a re-executed test binary to be the writer that
// TestCrashDurability kills.
const crashDirEnv = "EVS_SQLITESTORE_CRASH_DIR"

const (
	crashItems = 20_000 // far more than the writer gets through before it is killed
	crashAcks  = 300    // acknowledgements the parent waits for before SIGKILL
)

// TestHelperProcess is not a test of its own: it is the child process of
// TestCrashDurability, which runs it with crashDirEnv set.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("the writer process of TestCrashDurability; runs only when re-executed by it")
	}
	ctx := context.Background()
	s, err := Open(ctx, dir, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateAccount(ctx, evs.Account{ID: "a", Name: "owner", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	newBatch(t, s, "b1", crashItems, t0.Add(24*time.Hour))
	fmt.Println("ready")
	// Each line printed is an acknowledgement: the writes before it have
	// returned, as an HTTP reply would be sent after them.
	for i := range crashItems {
		if err := s.CreateAccount(ctx, evs.Account{ID: fmt.Sprint("acct-", i), Name: fmt.Sprint("n", i), CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.PutResults(ctx, "a", "b1", resultsFor(i, i+1), t0); err != nil {
			t.Fatal(err)
		}
		rec := idempotency.Record{Scope: fmt.Sprint("scope-", i), Fingerprint: fmt.Sprint("fp-", i), LockedUntil: t0.Add(time.Hour), ExpiresAt: t0.Add(24 * time.Hour)}
		if _, _, err := s.ClaimIdempotency(ctx, rec, t0); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("ack %d\n", i)
	}
}

// TestCrashDurability kills a writing process with SIGKILL and checks that
// every write it acknowledged is in the database afterwards, and that no
// transaction is half there (results without their counts). Power loss,
// which also drops the operating system's cache, cannot be staged here; it
// is covered by synchronous=FULL, which TestOpenSettings checks.
// awaitKill holds a helper process until its parent kills it (SIGKILL
// ends it at once); a minute with no kill fails it, so that a helper whose
// parent died ends on its own.
func awaitKill(t *testing.T) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	select {
	case s := <-sig:
		t.Fatalf("ended by %v, not killed", s)
	case <-time.After(time.Minute):
		t.Fatal("not killed within a minute")
	}
}

// startHelper runs this test binary's test run as another process, with
// the environment variable env set to dir, and returns it with a scanner
// over what it prints.
func startHelper(t *testing.T, run, env, dir string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewScanner(out)
}

func TestCrashDurability(t *testing.T) {
	dir := t.TempDir()
	cmd, sc := startHelper(t, "TestHelperProcess", crashDirEnv, dir)
	acked, ready := -1, false
	for acked < crashAcks-1 && sc.Scan() {
		line := sc.Text()
		switch {
		case line == "ready":
			ready = true
		case strings.HasPrefix(line, "ack "):
			n, err := strconv.Atoi(strings.TrimPrefix(line, "ack "))
			if err != nil || n != acked+1 {
				cmd.Process.Kill()
				t.Fatalf("writer printed %q after ack %d", line, acked)
			}
			acked = n
		}
	}
	// Kill it while it writes the next records.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill writer: %v", err)
	}
	// Acknowledgements printed before the kill landed count too.
	for sc.Scan() {
		if n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "ack ")); err == nil && n == acked+1 {
			acked = n
		}
	}
	err := cmd.Wait()
	if !ready || acked < crashAcks-1 {
		t.Fatalf("writer stopped after %d acks (ready %v): %v", acked+1, ready, err)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("writer was not killed mid-way but ended with %v", cmd.ProcessState)
	}

	ctx := context.Background()
	s := openStore(t, dir, func() time.Time { return t0 })
	var check string
	if err := s.db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity_check = %q, %v", check, err)
	}
	for i := 0; i <= acked; i++ {
		if _, err := s.Account(ctx, fmt.Sprint("acct-", i)); err != nil {
			t.Fatalf("acknowledged account %d: %v", i, err)
		}
		rec, claimed, err := s.ClaimIdempotency(ctx, idempotency.Record{Scope: fmt.Sprint("scope-", i), Fingerprint: "other", LockedUntil: t0.Add(time.Hour), ExpiresAt: t0.Add(time.Hour)}, t0)
		if err != nil || claimed || rec.Fingerprint != fmt.Sprint("fp-", i) {
			t.Fatalf("acknowledged idempotency record %d: claimed=%v fingerprint=%q err=%v", i, claimed, rec.Fingerprint, err)
		}
	}
	rs, err := s.Results(ctx, "a", "b1", -1, crashItems, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) <= acked {
		t.Fatalf("%d results survived, but %d were acknowledged", len(rs), acked+1)
	}
	for i, r := range rs {
		if r.Seq != i {
			t.Fatalf("results survived with a gap: result %d has seq %d", i, r.Seq)
		}
	}
	b, err := s.Batch(ctx, "a", "b1")
	if err != nil {
		t.Fatal(err)
	}
	if b.Counters.Processed != len(rs) || b.Counters.Deliverable != len(rs) {
		t.Fatalf("counters %+v do not match the %d results written", b.Counters, len(rs))
	}
	t.Logf("%d writes acknowledged, %d results found after SIGKILL", acked+1, len(rs))
}

// keeperDirEnv tells a re-executed test binary to be the server whose
// idempotent calls TestKilledAfterReplyNeverReexecutes kills, and
// keeperModeEnv which Keeper it runs.
const (
	keeperDirEnv  = "EVS_SQLITESTORE_KEEPER_DIR"
	keeperModeEnv = "EVS_SQLITESTORE_KEEPER_MODE"
)

// keeperIn opens dir and a Keeper on it: "shared" (claim, then complete,
// on a plain Open) or "local" (claims in memory on OpenServing, as evs serve
// runs).
func keeperIn(ctx context.Context, mode, dir string) (*Store, *idempotency.Keeper, error) {
	switch mode {
	case "shared":
		s, err := Open(ctx, dir, time.Now)
		if err != nil {
			return nil, nil, err
		}
		return s, idempotency.New(s, time.Now), nil
	case "local":
		s, err := OpenServing(ctx, dir, time.Now)
		if err != nil {
			return nil, nil, err
		}
		return s, idempotency.NewLocal(s, time.Now), nil
	}
	return nil, nil, fmt.Errorf("unknown keeper mode %q", mode)
}

const (
	keeperWorkers = 16  // concurrent calls, so claims and completions share commits
	keeperAcks    = 400 // replies the parent waits for before SIGKILL
)

func keeperRequest(i int) idempotency.Request {
	return idempotency.Request{AccountID: "a", Method: "POST", Path: "/v1/verify", Key: fmt.Sprintf("key-%06d", i),
		ContentType: "application/json", Body: []byte(fmt.Sprintf(`{"email":"u%d@example.com"}`, i))}
}

// TestKeeperHelperProcess is the child of TestKilledAfterReplyNeverReexecutes:
// it serves idempotent calls from several goroutines and prints each reply
// once Do has returned it, as a server writes a reply to its client.
func TestKeeperHelperProcess(t *testing.T) {
	dir := os.Getenv(keeperDirEnv)
	if dir == "" {
		t.Skip("the server process of TestKilledAfterReplyNeverReexecutes; runs only when re-executed by it")
	}
	ctx := context.Background()
	s, k, err := keeperIn(ctx, os.Getenv(keeperModeEnv), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var (
		mu   sync.Mutex
		next int
	)
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for range keeperWorkers {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				r, replayed, err := k.Do(ctx, keeperRequest(i), func(context.Context) (idempotency.Reply, error) {
					return idempotency.Reply{StatusCode: 200, Body: []byte(fmt.Sprint("reply-", i))}, nil
				})
				if err != nil || replayed {
					t.Errorf("call %d: replayed=%v err=%v", i, replayed, err)
					return
				}
				mu.Lock()
				fmt.Fprintf(out, "reply %d %s\n", i, r.Body)
				out.Flush()
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// TestKilledAfterReplyNeverReexecutes SIGKILLs a process while it answers
// idempotent calls concurrently (their writes committed in shared groups)
// and checks that every call whose reply left the process is replayed
// afterwards, never run again. In local mode it also checks that the calls
// cut off by the kill left no in-progress record: their retries run at
// once, not after LockTimeout.
func TestKilledAfterReplyNeverReexecutes(t *testing.T) {
	for _, mode := range []string{"shared", "local"} {
		t.Run(mode, func(t *testing.T) { killedAfterReply(t, mode) })
	}
}

func killedAfterReply(t *testing.T, mode string) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKeeperHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), keeperDirEnv+"="+dir, keeperModeEnv+"="+mode)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	replies := map[int]string{}
	sc := bufio.NewScanner(out)
	read := func(line string) {
		var (
			i    int
			body string
		)
		if n, _ := fmt.Sscanf(line, "reply %d %s", &i, &body); n == 2 {
			replies[i] = body
		}
	}
	for len(replies) < keeperAcks && sc.Scan() {
		read(sc.Text())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill server: %v", err)
	}
	for sc.Scan() {
		read(sc.Text()) // replies written before the kill landed were received too
	}
	cmd.Wait()
	if len(replies) < keeperAcks {
		t.Fatalf("server stopped after %d replies", len(replies))
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("server was not killed mid-way but ended with %v", cmd.ProcessState)
	}

	s, k, err := keeperIn(context.Background(), mode, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, body := range replies {
		r, replayed, err := k.Do(context.Background(), keeperRequest(i), func(context.Context) (idempotency.Reply, error) {
			t.Errorf("call %d, whose reply %q was received before the kill, ran again", i, body)
			return idempotency.Reply{StatusCode: 200}, nil
		})
		if err != nil || !replayed || string(r.Body) != body {
			t.Fatalf("call %d after the kill: replayed=%v body=%q err=%v; want the reply %q replayed", i, replayed, r.Body, err, body)
		}
	}
	if mode == "local" {
		// The calls in flight at the kill: each left its finished record
		// (killed between the put and the reply: replayed) or nothing (run
		// now); none blocks its key as in progress.
		last := 0
		for i := range replies {
			last = max(last, i)
		}
		for i := range last + 2*keeperWorkers {
			if _, ok := replies[i]; ok {
				continue
			}
			_, _, err := k.Do(context.Background(), keeperRequest(i), func(context.Context) (idempotency.Reply, error) {
				return idempotency.Reply{StatusCode: 200, Body: []byte("retried")}, nil
			})
			if err != nil {
				t.Fatalf("retry of call %d, cut off by the kill: %v; want it replayed or run", i, err)
			}
		}
	}
	t.Logf("%d replies received before SIGKILL, all replayed after", len(replies))
}
