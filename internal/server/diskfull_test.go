package server_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/server"
)

// TestDiskFullHeals fills the data directory's file system (a small tmpfs)
// to the last byte, then frees it: while it is full /readyz answers 503 and
// a call that must write answers 503 unavailable; once there is room, with
// no restart, /readyz is 200 again, the call retried with the same
// Idempotency-Key is served (the failed first call left no record behind)
// and a batch is made and completed. It needs root to mount the tmpfs.
func TestDiskFullHeals(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs root on Linux to mount a small tmpfs as the data directory; docs/operations.md says how to check it by hand")
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); docs/operations.md says how to check it by hand", err, out)
	}
	// Registered first, so it runs last: after the server and its store
	// are closed.
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	h := start(t, options{dir: mnt})
	verify := func(key string) reply {
		t.Helper()
		return h.do(req{method: "POST", path: "/v1/verify", key: h.testKey, headers: map[string]string{"Idempotency-Key": key},
			body: `{"email":"accepted_email@x.example"}`})
	}
	if r := h.do(req{path: server.ReadyPath}); r.status != 200 {
		t.Fatalf("ready before: %d %s", r.status, r.body)
	}
	if r := verify("before"); r.status != 200 {
		t.Fatalf("verify before: %d %s", r.status, r.body)
	}

	fill(t, filepath.Join(mnt, "filler"))
	h.clock.Advance(2 * time.Second) // past the last readiness verdict
	if r := h.do(req{path: server.ReadyPath}); r.status != 503 || readyStatus(t, r) != "unavailable" {
		t.Fatalf("ready on a full disk: %d %s", r.status, r.body)
	}
	if r := verify("during"); r.status != 503 || r.errorCode(t) != "unavailable" {
		t.Fatalf("a call that must write, on a full disk: %d %s", r.status, r.body)
	}

	if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(2 * time.Second)
	if r := h.do(req{path: server.ReadyPath}); r.status != 200 {
		t.Fatalf("ready once there is room: %d %s", r.status, r.body)
	}
	if r := verify("during"); r.status != 200 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the call retried once there is room: %d %v %s", r.status, r.header, r.body)
	}
	b := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":["accepted_email@x.example","rejected_email@x.example"]}`})
	if b.status != 201 {
		t.Fatalf("create a batch once there is room: %d %s", b.status, b.body)
	}
	if e := h.poll(h.testKey, decodeEnvelope(t, b).Request.ID, 20*time.Second); e.Request.State != "completed" {
		t.Fatalf("the batch: %+v", e.Request)
	}
}

// fill writes zeros to file until its file system is full.
func fill(t *testing.T, file string) {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill: %v", err)
			}
			break
		}
	}
	// The last partial page too.
	for _, err := f.Write(buf[:1]); err == nil; _, err = f.Write(buf[:1]) {
	}
}
