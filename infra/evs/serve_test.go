package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
)

// servingEVS is `evs serve` running in-process.
type servingEVS struct {
	out, errOut *testkit.LogBuffer
	stop        func() int
}

// serveInProcess runs `evs serve args...` with env until it says it listens,
// and returns it; stop ends it (as SIGTERM does) and returns its exit code.
func serveInProcess(t *testing.T, env map[string]string, args ...string) servingEVS {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := servingEVS{out: &testkit.LogBuffer{}, errOut: &testkit.LogBuffer{}}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"serve"}, args...), s.out, s.errOut, func(k string) string { return env[k] })
	}()
	stopped := false
	code := 0
	s.stop = func() int {
		if !stopped {
			stopped = true
			cancel()
			select {
			case code = <-done:
			case <-time.After(30 * time.Second):
				t.Error("serve did not stop")
			}
		}
		return code
	}
	t.Cleanup(func() { s.stop() })
	testkit.Eventually(t, 20*time.Second, func() error {
		select {
		case code := <-done:
			t.Fatalf("serve exited %d before listening: %q %q", code, s.out.String(), s.errOut.String())
		default:
		}
		if !strings.Contains(s.out.String(), " listening on ") {
			return fmt.Errorf("serve is not listening: %q %q", s.out.String(), s.errOut.String())
		}
		return nil
	})
	return s
}

var printedKey = regexp.MustCompile(`EVS_API_KEY=(evs\.[A-Za-z0-9_-]{43})`)

// TestFirstStartNeverLosesTheKey: with its port taken, a first start fails
// with one line naming the address and creates nothing, so the next start,
// on a free port, still makes the sandbox account and prints its key; a
// start that prints no key says how to make one.
func TestFirstStartNeverLosesTheKey(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	dir := t.TempDir() + "/data"
	env := map[string]string{"EVS_DATA_DIR": dir, "EVS_ADDR": addr, "EVS_SMTP": "off", "EVS_DNS_SERVERS": "127.0.0.1:9"}

	code, out, stderr := runEVS(context.Background(), env, "serve", "--test-account")
	if code != 1 || out != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, addr+" (EVS_ADDR)") || !strings.Contains(stderr, "another program") {
		t.Fatalf("start on a busy port: exit %d, stdout %q, stderr %q; want 1 and one line naming %s", code, out, stderr, addr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the failed start made the data directory (%v)", err)
	}

	busy.Close()
	first := serveInProcess(t, env, "--test-account")
	if !printedKey.MatchString(first.out.String()) || !strings.Contains(first.out.String(), "test-mode") {
		t.Fatalf("the first start on a free port printed no key: %q", first.out.String())
	}
	if strings.Contains(first.errOut.String(), "keys create") {
		t.Errorf("a start that printed a key also says how to make one: %s", first.errOut.String())
	}
	if code := first.stop(); code != 0 {
		t.Fatalf("serve exited %d: %s", code, first.errOut.String())
	}

	again := serveInProcess(t, env, "--test-account")
	if strings.Contains(again.out.String(), "EVS_API_KEY=") || regexp.MustCompile(`evs\.[A-Za-z0-9_-]{43}`).MatchString(again.out.String()+again.errOut.String()) {
		t.Fatalf("the second start printed a key: %q %q", again.out.String(), again.errOut.String())
	}
	hint := "EVS_DATA_DIR=" + dir + " evs keys create --account sandbox --test"
	if n := strings.Count(again.errOut.String(), hint); n != 1 {
		t.Fatalf("the second start says %d times how to make a key (%q), want once:\n%s", n, hint, again.errOut.String())
	}
	// The hint works as printed, while the server runs.
	if code, out, stderr := runEVS(context.Background(), map[string]string{"EVS_DATA_DIR": dir}, "keys", "create", "--account", "sandbox", "--test"); code != 0 || !keyRE.MatchString(strings.TrimSpace(out)) {
		t.Fatalf("the hinted command: exit %d %q %q", code, out, stderr)
	}
}

// TestMetricsPortBusy: a busy EVS_METRICS_ADDR stops the first start too,
// before the account is made.
func TestMetricsPortBusy(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir() + "/data"
	env := map[string]string{"EVS_DATA_DIR": dir, "EVS_ADDR": "127.0.0.1:0", "EVS_METRICS_ADDR": busy.Addr().String(), "EVS_SMTP": "off"}
	code, out, stderr := runEVS(context.Background(), env, "serve", "--test-account")
	if code != 1 || out != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, busy.Addr().String()+" (EVS_METRICS_ADDR)") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the failed start made the data directory (%v)", err)
	}
}
