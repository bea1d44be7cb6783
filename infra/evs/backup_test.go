package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
)

// idemCall sends body to u with the key and an Idempotency-Key, and returns
// the status, whether the reply says it is a replay, and the body.
func idemCall(t *testing.T, key, u, idem, body string) (int, bool, string) {
	t.Helper()
	req, err := http.NewRequest("POST", u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idem)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", string(b)
}

// waitFinal polls the batch until it is final.
func waitFinal(t *testing.T, key, base, id string) batchEnvelope {
	t.Helper()
	var e batchEnvelope
	testkit.Eventually(t, 60*time.Second, func() error {
		if e = getBatch(t, key, base, id); e.Request.State == "queued" || e.Request.State == "running" {
			return fmt.Errorf("batch %s not final: %+v", id, e)
		}
		return nil
	})
	return e
}

// TestBackupAndRestore backs up the data directory of a running evs serve
// (a separate process) with `evs backup`, while it writes a batch, and
// starts a second evs serve on the copy: the same key works, the finished
// batch has the same results, the batch caught mid-way is finished there,
// the webhook secret is the same, and the Idempotency-Keys already
// answered are replayed, not run again.
func TestBackupAndRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := buildEVS(t)
	dir := t.TempDir()
	denv := map[string]string{"EVS_DATA_DIR": dir}
	code, out, stderr := runEVS(ctx, denv, "keys", "create", "--account", "sandbox", "--test")
	key := strings.TrimSpace(out)
	if code != 0 || !keyRE.MatchString(key) {
		t.Fatalf("keys create: exit %d %q %q", code, out, stderr)
	}
	code, out, stderr = runEVS(ctx, denv, "webhooks", "secret", "--account", "sandbox")
	secret := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("webhooks secret: exit %d %q %q", code, out, stderr)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "EVS_SMTP=off", "EVS_DNS_SERVERS=127.0.0.1:9"}
	p1 := startServe(t, bin, append(env, "EVS_DATA_DIR="+dir))

	const verifyBody = `{"email":"alice+rejected_email@example.com"}`
	status, replayed, verified := idemCall(t, key, p1.base+"/v1/verify", "v-1", verifyBody)
	if status != 200 || replayed {
		t.Fatalf("verify: %d replayed=%v %s", status, replayed, verified)
	}
	batchBody := func(n int, tag string) string {
		emails := make([]string, n)
		for i := range emails {
			emails[i] = fmt.Sprintf("%s%d+rejected_email@x%d.example", tag, i, i%20)
		}
		b, _ := json.Marshal(map[string]any{"emails": emails, "mode": "quick"})
		return string(b)
	}
	// A batch is created with 201; its replay is 200 with the batch as it
	// is now (contract section 3).
	created := func(base, idem, body string, want int) (string, bool, string) {
		t.Helper()
		status, replayed, raw := idemCall(t, key, base+"/v1/requests", idem, body)
		var e batchEnvelope
		if status != want || json.Unmarshal([]byte(raw), &e) != nil || e.Request.ID == "" {
			t.Fatalf("create batch %s: %d %s", idem, status, raw)
		}
		return e.Request.ID, replayed, raw
	}
	doneBody := batchBody(300, "a")
	doneID, _, _ := created(p1.base, "b-done", doneBody, 201)
	doneFinal := waitFinal(t, key, p1.base, doneID)
	doneRows, _ := readResults(t, key, p1.base, doneID, "", true)
	// The second batch is being written while the backup runs (unless this
	// machine finishes 5,000 addresses first, which changes nothing below).
	liveBody := batchBody(5000, "b")
	liveID, _, _ := created(p1.base, "b-live", liveBody, 201)

	dest := filepath.Join(t.TempDir(), "restored")
	bk := exec.Command(bin, "backup", dest)
	bk.Env = append(env, "EVS_DATA_DIR="+dir)
	if out, err := bk.CombinedOutput(); err != nil {
		t.Fatalf("evs backup: %v\n%s", err, out)
	}
	// The first server was not stopped, and still answers.
	if e := getBatch(t, key, p1.base, doneID); e.Request.State != doneFinal.Request.State {
		t.Fatalf("the original server after the backup: %+v", e)
	}
	// A backup never overwrites.
	if code, _, stderr := runEVS(ctx, denv, "backup", dest); code != 1 || !strings.Contains(stderr, "not empty") {
		t.Fatalf("backup over the last one: exit %d %q", code, stderr)
	}

	p2 := startServe(t, bin, append(env, "EVS_DATA_DIR="+dest))
	if e := getBatch(t, key, p2.base, doneID); !reflect.DeepEqual(e, doneFinal) {
		t.Fatalf("the finished batch on the copy: %+v, want %+v", e, doneFinal)
	}
	if rows, _ := readResults(t, key, p2.base, doneID, "", true); !reflect.DeepEqual(rows, doneRows) {
		t.Fatalf("the copy has %d results, the original %d, or they differ", len(rows), len(doneRows))
	}
	live := waitFinal(t, key, p2.base, liveID)
	if live.Request.State != "completed" || live.Counters.Processed != 5000 || live.Counters.Undeliverable != 5000 {
		t.Fatalf("the batch caught mid-way, on the copy: %+v", live)
	}
	status, replayed, again := idemCall(t, key, p2.base+"/v1/verify", "v-1", verifyBody)
	if status != 200 || !replayed || withoutRequestID(t, again) != withoutRequestID(t, verified) {
		t.Fatalf("verify replay on the copy: %d replayed=%v %s; want the first reply %s", status, replayed, again, verified)
	}
	id, replayed, reply := created(p2.base, "b-done", doneBody, 200)
	if id != doneID || !replayed || !strings.Contains(reply, `"replayed":true`) {
		t.Fatalf("batch replay on the copy: %s replayed=%v, want %s replayed", id, replayed, doneID)
	}
	code, out, _ = runEVS(ctx, map[string]string{"EVS_DATA_DIR": dest}, "webhooks", "secret", "--account", "sandbox")
	if code != 0 || strings.TrimSpace(out) != secret {
		t.Fatalf("the copy's webhook secret differs: exit %d", code)
	}
}

// withoutRequestID is a reply body without its requestId, which names each
// request, replays included.
func withoutRequestID(t *testing.T, body string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	delete(m, "requestId")
	b, _ := json.Marshal(m)
	return string(b)
}

// TestKeysNeverMigrateUnderAServer: `evs keys` on a data directory whose
// database is older than this evs, while a server (an older evs serve,
// here its lock) holds the directory, refuses in one line and leaves the
// database as it was.
func TestKeysNeverMigrateUnderAServer(t *testing.T) {
	dir := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(dir, sqlitestore.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`PRAGMA user_version = 1`); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, sqlitestore.LockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"EVS_DATA_DIR": dir}
	for _, args := range [][]string{{"keys", "create", "--account", "acme"}, {"keys", "list"}, {"webhooks", "secret", "--account", "acme"}} {
		code, out, stderr := runEVS(context.Background(), env, args...)
		if code != 1 || out != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "schema version 1") || !strings.Contains(stderr, "evs serve is running") {
			t.Errorf("%v under a server on an older database: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
	}
	var v int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil || v != 1 {
		t.Fatalf("schema version after the refusals: %d, %v; want 1", v, err)
	}
}
