// Package oapicodegen checks that a client generated from api/openapi.yaml
// by oapi-codegen, with its default settings, builds and talks to a real
// `evs serve`. It is a module of its own so that oapi-codegen, its runtime
// and echo (which the default settings' server code imports) stay out of
// the service's go.mod; `make oapi-check` generates evsapi/ and runs this.
package oapicodegen

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/api/oapi-codegen/evsapi"
)

// serve builds evs from the repository around this module, makes a
// test-mode key in a fresh data directory and starts `evs serve` on a free
// loopback port. It returns the base URL and the key.
func serve(t *testing.T) (base, key string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "evs")
	build := exec.Command("go", "build", "-o", bin, "./infra/evs")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build evs: %v\n%s", err, out)
	}
	env := append(os.Environ(), "EVS_DATA_DIR="+filepath.Join(dir, "data"), "EVS_ADDR=127.0.0.1:0")
	mk := exec.Command(bin, "keys", "create", "--account", "roundtrip", "--test")
	mk.Env = env
	out, err := mk.Output()
	if err != nil {
		t.Fatalf("evs keys create: %v", err)
	}
	key = strings.TrimSpace(string(out))

	ctx, cancel := context.WithCancel(context.Background())
	srv := exec.CommandContext(ctx, bin, "serve")
	srv.Env = env
	srv.Cancel = func() error { return srv.Process.Signal(os.Interrupt) }
	srv.WaitDelay = 10 * time.Second
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("evs serve: %v", err)
	}
	t.Cleanup(func() { cancel(); _ = srv.Wait() })
	listening := regexp.MustCompile(`listening on (http://\S+)`)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case base = <-found:
	case <-time.After(2 * time.Minute):
		t.Fatal("evs serve did not say where it listens within 2 minutes")
	}
	return base, key
}

func TestGeneratedClientRoundTrip(t *testing.T) {
	base, key := serve(t)
	withKey := func(_ context.Context, r *http.Request) error {
		r.Header.Set("X-Api-Key", key)
		return nil
	}
	c, err := evsapi.NewClientWithResponses(base, evsapi.WithRequestEditorFn(withKey))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("verify", func(t *testing.T) {
		tests := []struct {
			email          string
			status, reason string
		}{
			{"alice+accepted_email@example.com", "deliverable", "accepted_email"},
			{"bob+rejected_email@example.com", "undeliverable", "rejected_email"},
			{"carol+accept_all@example.com", "risky", "accept_all"},
		}
		for _, tc := range tests {
			r, err := c.VerifyWithResponse(ctx, nil, evsapi.VerifyJSONRequestBody{Email: tc.email})
			if err != nil {
				t.Fatalf("%s: %v", tc.reason, err)
			}
			if r.JSON200 == nil {
				t.Fatalf("%s: %d %s", tc.reason, r.StatusCode(), r.Body)
			}
			v, err := r.JSON200.AsVerifyResult()
			if err != nil {
				t.Fatalf("%s: decode: %v", tc.reason, err)
			}
			if string(v.Status) != tc.status || string(v.Decision.Reason) != tc.reason || v.Decision.Email != tc.email {
				t.Errorf("%s: got %s/%s for %q", tc.reason, v.Status, v.Decision.Reason, v.Decision.Email)
			}
		}
	})

	t.Run("error envelope", func(t *testing.T) {
		bad, err := evsapi.NewClientWithResponses(base)
		if err != nil {
			t.Fatal(err)
		}
		r, err := bad.VerifyWithResponse(ctx, nil, evsapi.VerifyJSONRequestBody{Email: "a@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		if r.JSON401 == nil || r.JSON401.Error.Code != "unauthorized" {
			t.Fatalf("no key: %d %s", r.StatusCode(), r.Body)
		}
	})

	t.Run("batch", func(t *testing.T) {
		emails := []string{"a+accepted_email@example.com", "b+mailbox_full@example.com", "a+accepted_email@example.com"}
		name := evsapi.BatchName("round trip")
		created, err := c.CreateBatchWithResponse(ctx, nil, evsapi.CreateBatchJSONRequestBody{Emails: &emails, Name: &name})
		if err != nil {
			t.Fatal(err)
		}
		if created.JSON201 == nil {
			t.Fatalf("create: %d %s", created.StatusCode(), created.Body)
		}
		id := created.JSON201.Request.Id.String()
		for {
			got, err := c.GetBatchWithResponse(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.JSON200 == nil {
				t.Fatalf("poll: %d %s", got.StatusCode(), got.Body)
			}
			if got.JSON200.Request.State == "completed" {
				if n := got.JSON200.Counters; n.Total != 3 || n.Duplicates != 1 || n.Processed != 2 {
					t.Errorf("counters %+v", n)
				}
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("batch still %s", got.JSON200.Request.State)
			case <-time.After(100 * time.Millisecond):
			}
		}
		res, err := c.GetResultsWithResponse(ctx, id, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.JSON200 == nil {
			t.Fatalf("results: %d %s", res.StatusCode(), res.Body)
		}
		statuses := map[string]string{}
		for _, r := range res.JSON200.Results {
			statuses[r.Email] = string(r.Status)
		}
		want := map[string]string{"a+accepted_email@example.com": "deliverable", "b+mailbox_full@example.com": "risky"}
		if len(statuses) != len(want) || statuses[emails[0]] != want[emails[0]] || statuses[emails[1]] != want[emails[1]] {
			t.Errorf("results %v, want %v", statuses, want)
		}
		list, err := c.ListBatchesWithResponse(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if list.JSON200 == nil || len(list.JSON200.Requests) != 1 || list.JSON200.Requests[0].Request.Name == nil || *list.JSON200.Requests[0].Request.Name != name {
			t.Errorf("list: %d %s", list.StatusCode(), list.Body)
		}
	})
}
