package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
)

// run runs the command line args and returns the exit code: 0, 1 for a
// failure, 2 for a command-line mistake.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return execute(newRoot(&cli{ctx: ctx, stdout: stdout, stderr: stderr, getenv: getenv}), args, stderr)
}

// runEVS runs the command in-process and returns its exit code and output.
func runEVS(ctx context.Context, env map[string]string, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut, func(k string) string { return env[k] })
	return code, out.String(), errOut.String()
}

func TestUsage(t *testing.T) {
	cases := [][]string{{}, {"nope"}, {"keys"}, {"keys", "create"}, {"keys", "revoke"}, {"verify"}, {"verify", "--mode", "deep", "a@b.example"}, {"batch"}, {"backup"}, {"backup", "a", "b"}, {"completion"}}
	for _, args := range cases {
		if code, _, stderr := runEVS(context.Background(), nil, args...); code != 2 || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a usage message", args, code, stderr)
		}
	}
	if code, out, _ := runEVS(context.Background(), nil, "version"); code != 0 || !strings.HasPrefix(out, "evs ") {
		t.Errorf("version: %d %q", code, out)
	}
}

var keyRE = regexp.MustCompile(`^evs\.[A-Za-z0-9_-]{43}$`)

func TestKeysEmbedded(t *testing.T) {
	env := map[string]string{"EVS_DATA_DIR": t.TempDir()}
	ctx := context.Background()
	code, out, stderr := runEVS(ctx, env, "keys", "create", "--account", "acme")
	key := strings.TrimSpace(out)
	if code != 0 || !keyRE.MatchString(key) || strings.Count(out, "\n") != 1 {
		t.Fatalf("create: %d %q %q", code, out, stderr)
	}
	code, out, _ = runEVS(ctx, env, "keys", "create", "--account", "acme", "--test")
	if code == 0 {
		t.Fatalf("a test key on a live account was accepted: %q", out)
	}
	code, out, _ = runEVS(ctx, env, "keys", "list")
	id := authorizer.KeyID(authorizer.HashKey(key))
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "acme") || strings.Contains(out, key) {
		t.Fatalf("list: %d %q", code, out)
	}
	code, out, _ = runEVS(ctx, env, "keys", "revoke", id)
	if code != 0 || !strings.Contains(out, id) {
		t.Fatalf("revoke by id: %d %q", code, out)
	}
	if _, out, _ = runEVS(ctx, env, "keys", "list"); !strings.Contains(out, "revoked") {
		t.Fatalf("list after revoke: %q", out)
	}
	if code, _, stderr = runEVS(ctx, env, "keys", "revoke", "evs."+strings.Repeat("Z", 43)); code != 1 || !strings.Contains(stderr, "no such key") || strings.Contains(stderr, strings.Repeat("Z", 43)) {
		t.Fatalf("revoke unknown: %d %q", code, stderr)
	}
}

// TestKeysRevokeByIDPrefix: revoke takes the start of a key ID, as a user
// copies it from evs keys list, when it names exactly one key; a start
// that several keys share names them and revokes none; a start shorter
// than four characters is not taken.
func TestKeysRevokeByIDPrefix(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateAccount(ctx, evs.Account{ID: "acct-1", Name: "acme", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"abcd11110000", "abcd22220000", "beef00000000"} {
		hash := id + strings.Repeat("0", 52)
		if err := st.CreateKey(ctx, evs.Key{ID: id, Hash: hash, AccountID: "acct-1", CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	env := map[string]string{"EVS_DATA_DIR": dir}
	if code, _, stderr := runEVS(ctx, env, "keys", "revoke", "abcd"); code != 1 || !strings.Contains(stderr, "2 key ids start with") ||
		!strings.Contains(stderr, "abcd11110000") || !strings.Contains(stderr, "abcd22220000") {
		t.Fatalf("revoke a shared start: %d %q", code, stderr)
	}
	if code, _, stderr := runEVS(ctx, env, "keys", "revoke", "bee"); code != 1 || !strings.Contains(stderr, "no such key") {
		t.Fatalf("revoke a 3-character start: %d %q", code, stderr)
	}
	if code, out, stderr := runEVS(ctx, env, "keys", "revoke", "abcd2"); code != 0 || !strings.Contains(out, "revoked key abcd22220000") {
		t.Fatalf("revoke a unique start: %d %q %q", code, out, stderr)
	}
	_, list, _ := runEVS(ctx, env, "keys", "list")
	if n := strings.Count(list, "revoked"); n != 1 || !regexp.MustCompile(`abcd22220000 +acme +live +revoked`).MatchString(list) {
		t.Fatalf("%d keys revoked, want abcd22220000 alone:\n%s", n, list)
	}
}

// TestCLIMessagesInUserWords: a failure names what failed and why, not
// the package that said so, and account names are checked.
func TestCLIMessagesInUserWords(t *testing.T) {
	ctx := context.Background()
	env := map[string]string{"EVS_DATA_DIR": t.TempDir()}
	code, _, stderr := runEVS(ctx, env, "keys", "create", "--account", "my acct")
	if code != 1 || !strings.Contains(stderr, "An account name is 1 to 128 letters") || strings.Contains(stderr, "invalid_request") {
		t.Fatalf("an account name with a space: %d %q", code, stderr)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env["EVS_DATA_DIR"] = filepath.Join(file, "data") // under a file: cannot be made
	code, _, stderr = runEVS(ctx, env, "keys", "list")
	if code != 1 || !strings.Contains(stderr, "data directory") || strings.Contains(stderr, "sqlitestore") {
		t.Fatalf("a data directory that cannot be made: %d %q", code, stderr)
	}
}

// TestKeysDynamoDB: `evs keys create --dynamodb-table` makes a key the
// DynamoDB store resolves.
func TestKeysDynamoDB(t *testing.T) {
	ddb := testkit.DynamoDB(t)
	tables := dynamostore.Tables{Keys: testkit.UniqueName(t, "keys")}
	if err := dynamostore.CreateTables(context.Background(), ddb, tables); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"AWS_ENDPOINT_URL": testkit.MotoEndpoint(t), "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"} {
		t.Setenv(k, v)
	}
	plan := newPlan(t, apiGateway(t))
	code, out, stderr := runEVS(context.Background(), nil, "keys", "create", "--account", "cloud", "--test", "--dynamodb-table", tables.Keys, "--usage-plan", plan)
	key := strings.TrimSpace(out)
	if code != 0 || !keyRE.MatchString(key) {
		t.Fatalf("create: %d %q %q", code, out, stderr)
	}
	st := dynamostore.New(dynamostore.Config{Client: ddb, Tables: tables, Now: time.Now})
	k, err := st.KeyByHash(context.Background(), authorizer.HashKey(key))
	if err != nil {
		t.Fatalf("the key is not in DynamoDB: %v", err)
	}
	a, err := st.Account(context.Background(), k.AccountID)
	if err != nil || a.Name != "cloud" || !a.Test {
		t.Fatalf("account %+v %v", a, err)
	}
}

func TestVerifyCommand(t *testing.T) {
	smtp := testkit.StartSMTP(t, testkit.SMTPOptions{IP: "127.0.0.1", Rcpt: func(a string) string {
		if strings.HasPrefix(a, "alice@") {
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 no such user"
	}})
	dns := testkit.StartDNS(t)
	dns.AddRecord("corp.example. 300 IN MX 10 mx.corp.example.")
	dns.AddRecord("mx.corp.example. 300 IN A 127.0.0.1")
	env := map[string]string{"EVS_DNS_SERVERS": dns.Addr, "EVS_SMTP_PORT": fmt.Sprint(smtp.Port), "EVS_SMTP_HELO": "probe.evs.test", "EVS_EGRESS_ALLOW": "127.0.0.0/8"}
	code, out, stderr := runEVS(context.Background(), env, "verify", "alice@corp.example", "bob@corp.example", "bad@@x")
	if code != 0 {
		t.Fatalf("%d %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{"accepted_email", "rejected_email", "invalid_syntax"}
	if len(lines) != 3 {
		t.Fatalf("%d lines: %s", len(lines), out)
	}
	for i, l := range lines {
		var v struct {
			Status   string `json:"status"`
			Decision struct {
				Reason string `json:"reason"`
			} `json:"decision"`
		}
		if err := json.Unmarshal([]byte(l), &v); err != nil || v.Decision.Reason != want[i] {
			t.Fatalf("line %d: %s", i, l)
		}
	}
	code, out, _ = runEVS(context.Background(), env, "verify", "--mode", "quick", "alice@corp.example")
	if code != 0 || !strings.Contains(out, `"mailbox_not_checked"`) {
		t.Fatalf("quick: %s", out)
	}
}

// TestServeAndBatch runs `evs serve` as `make run` does, reads the key it
// prints, runs the printed curl line's request, then `evs batch` against it.
func TestServeAndBatch(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	env := map[string]string{"EVS_DATA_DIR": dir, "EVS_ADDR": addr, "EVS_SMTP": "off", "EVS_DNS_SERVERS": "127.0.0.1:9"}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut testkit.LogBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--test-account"}, &out, &errOut, func(k string) string { return env[k] })
	}()
	var key string
	keyLine := regexp.MustCompile(`EVS_API_KEY=(evs\.[A-Za-z0-9_-]{43})`)
	out.Await(t, 20*time.Second, "the key printed and serve listening", func(s string) bool {
		if m := keyLine.FindStringSubmatch(s); m != nil && strings.Contains(s, "listening") {
			key = m[1]
		}
		return key != ""
	})
	if !strings.Contains(out.String(), "curl -s http://"+addr+"/v1/verify") {
		t.Fatalf("no curl example: %s", out.String())
	}
	// Beside the key, the console's address, which serves the page.
	if m := regexp.MustCompile(`(?m)^  (http://\S+/console/)$`).FindStringSubmatch(out.String()); m == nil || m[1] != "http://"+addr+"/console/" {
		t.Fatalf("no console address beside the key: %s", out.String())
	} else if res, err := http.Get(m[1]); err != nil || res.StatusCode != http.StatusOK || res.Header.Get("Content-Security-Policy") == "" {
		t.Fatalf("GET %s: %v %v", m[1], res, err)
	} else {
		res.Body.Close()
	}
	// The printed example, as curl would send it.
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/verify", strings.NewReader(`{"email":"alice+rejected_email@example.com"}`))
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Status string `json:"status"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if resp.StatusCode != 200 || v.Status != "undeliverable" {
		t.Fatalf("example call: %d %s", resp.StatusCode, v.Status)
	}

	csvPath := filepath.Join(t.TempDir(), "list.csv")
	var b strings.Builder
	b.WriteString("email\n")
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&b, "user%d@x.example\n", i)
	}
	b.WriteString("rejected_email@x.example\nuser1@x.example\n")
	if err := os.WriteFile(csvPath, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	benv := map[string]string{"EVS_API_KEY": key}
	code, bout, berr := runEVS(context.Background(), benv, "batch", csvPath, "--url", "http://"+addr, "--mode", "quick", "--poll", "50ms")
	if code != 0 || !strings.Contains(bout, "completed: 0 deliverable, 1 undeliverable, 0 risky, 200 unknown") {
		t.Fatalf("batch: %d %q %q", code, bout, berr)
	}
	res, err := os.ReadFile(filepath.Join(filepath.Dir(csvPath), "list.results.csv"))
	// The list's own rows come back, the repeat of user1 included.
	if err != nil || strings.Count(string(res), "\n") != 203 {
		t.Fatalf("results file: %v, %d lines", err, strings.Count(string(res), "\n"))
	}
	// Running it again finds the same batch (same Idempotency-Key) rather
	// than creating another.
	if code, bout2, _ := runEVS(context.Background(), benv, "batch", csvPath, "--url", "http://"+addr, "--mode", "quick", "--poll", "50ms"); code != 0 || bout2 != bout {
		t.Fatalf("second run: %q vs %q", bout2, bout)
	}

	// `evs keys` works while the server runs on the same directory.
	if code, kout, kerr := runEVS(context.Background(), map[string]string{"EVS_DATA_DIR": dir}, "keys", "create", "--account", "second"); code != 0 || !keyRE.MatchString(strings.TrimSpace(kout)) {
		t.Fatalf("keys while serving: %d %q %q", code, kout, kerr)
	}
	// A second server on the same directory is refused at once, in one
	// line: two would each keep their own Idempotency-Key claims.
	env2 := map[string]string{"EVS_DATA_DIR": dir, "EVS_ADDR": "127.0.0.1:0", "EVS_SMTP": "off", "EVS_DNS_SERVERS": "127.0.0.1:9"}
	if code, sout, serr := runEVS(context.Background(), env2, "serve"); code != 1 || serr != "evs: data directory "+dir+" is in use by another evs serve\n" || sout != "" {
		t.Fatalf("second serve on the same directory: exit %d, stdout %q, stderr %q", code, sout, serr)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	// A second start does not make another account or print a key.
	st, err := sqlitestore.Open(context.Background(), dir, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if n, _ := st.CountAccounts(context.Background()); n != 2 {
		t.Fatalf("%d accounts, want 2", n)
	}
}
