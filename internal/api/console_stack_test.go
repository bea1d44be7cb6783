package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
)

// stack is a real `evs serve` on loopback (SQLite store in a temp dir)
// with one test-mode account, whose key it hands out: test mode touches no
// network, so the console can be driven through every outcome offline.
type stack struct {
	base, key string
}

// startStack starts the stack; tune, when given, adjusts the server's
// options first (the batch worker's, for the cancel test).
func startStack(t *testing.T, tune ...func(*server.Options)) stack {
	t.Helper()
	svc := serveTestAccount(t, "console", tune...)
	key, err := authorizer.IssueKey(context.Background(), svc.st, svc.acct, "", time.Now())
	if err != nil {
		t.Fatalf("create key: %v", err)
	}
	return stack{base: svc.base, key: key}
}

// testService is a real `evs serve` on loopback, on a SQLite store in a
// temp dir, with one test-mode account: test mode touches no network.
type testService struct {
	base string
	st   *sqlitestore.Store
	acct string
	// stop stops the server (again at the test's end: only once).
	stop func()
}

// serveTestAccount starts a testService whose account is named name;
// tune, when given, adjusts the server's options first.
func serveTestAccount(t *testing.T, name string, tune ...func(*server.Options)) *testService {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlitestore.OpenServing(ctx, dir, time.Now)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	cfg, err := config.FromEnv(func(name string) string {
		return map[string]string{"EVS_DATA_DIR": dir, "EVS_SMTP": "off", "EVS_DNS_SERVERS": "127.0.0.1:9"}[name]
	}, false)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	opts := server.Options{Config: cfg, Store: st, Now: time.Now,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))}
	for _, f := range tune {
		f(&opts)
	}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatalf("server: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("serve: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("server did not stop within 30 s")
			}
		})
	}
	t.Cleanup(stop)
	a := evs.Account{ID: "acct-" + name, Name: name, Test: true, CreatedAt: time.Now()}
	if err := st.CreateAccount(ctx, a); err != nil {
		t.Fatalf("create account: %v", err)
	}
	return &testService{base: "http://" + ln.Addr().String(), st: st, acct: a.ID, stop: stop}
}

// get calls the API as any client does, with the stack's key, and
// returns the body of its 200 reply.
func (s stack) get(t *testing.T, path, accept string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", s.key)
	req.Header.Set("Accept", accept)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", path, res.StatusCode, err, b)
	}
	return b
}

// batchDone creates a test-mode batch of the addresses in quick mode as
// any client does and waits for it to complete (test mode takes
// milliseconds); it returns the batch's id.
func (s stack) batchDone(t *testing.T, emails ...string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"emails": emails, "mode": "quick"})
	req, err := http.NewRequest(http.MethodPost, s.base+"/v1/requests", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", s.key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var env struct {
		Request struct{ ID, State string } `json:"request"`
	}
	if err := json.NewDecoder(res.Body).Decode(&env); err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("create a batch: %d %v", res.StatusCode, err)
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		if env.Request.State == "completed" {
			return nil
		}
		if err := json.Unmarshal(s.get(t, "/v1/requests/"+env.Request.ID, "application/json"), &env); err != nil {
			t.Fatal(err)
		}
		return fmt.Errorf("batch %s still %s", env.Request.ID, env.Request.State)
	})
	return env.Request.ID
}
