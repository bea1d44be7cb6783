package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/sqlitestore"
)

// effectStore records the batches the store really created (a
// CreateBatchWithin that succeeded), and can fail the next writes of an
// idempotent reply as a full disk does. Wrapped so, the server keeps
// Idempotency-Key records in shared mode (CompleteIdempotency);
// localEffectStore keeps the local mode of `evs serve` (PutIdempotency).
type effectStore struct {
	server.Store
	// failReplies is how many reply writes still fail.
	failReplies atomic.Int32

	mu      sync.Mutex
	created []string // batch ids, in creation order
}

func (e *effectStore) CreateBatchWithin(ctx context.Context, b evs.Batch, items []evs.Item, maxActive int) error {
	err := e.Store.CreateBatchWithin(ctx, b, items, maxActive)
	if err == nil {
		e.mu.Lock()
		e.created = append(e.created, b.ID)
		e.mu.Unlock()
	}
	return err
}

func (e *effectStore) batches() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.created...)
}

// replyFault fails one reply write while failReplies is above zero.
func (e *effectStore) replyFault() error {
	if e.failReplies.Add(-1) >= 0 {
		return evs.Errorf(evs.CodeUnavailable, "disk full")
	}
	e.failReplies.Store(0)
	return nil
}

func (e *effectStore) CompleteIdempotency(ctx context.Context, scope string, status int, h map[string]string, body []byte) error {
	if err := e.replyFault(); err != nil {
		return err
	}
	return e.Store.CompleteIdempotency(ctx, scope, status, h, body)
}

type localEffectStore struct {
	*effectStore
	local *sqlitestore.Store
}

func (l localEffectStore) LookupIdempotency(ctx context.Context, scope string, now time.Time) (idempotency.Record, bool, error) {
	return l.local.LookupIdempotency(ctx, scope, now)
}

func (l localEffectStore) PutIdempotency(ctx context.Context, rec idempotency.Record, now time.Time) error {
	if err := l.replyFault(); err != nil {
		return err
	}
	return l.local.PutIdempotency(ctx, rec, now)
}

func (l localEffectStore) Exclusive() bool { return l.local.Exclusive() }

// wrapEffects returns the harness option that serves through es, in the
// local mode of `evs serve` or the shared mode.
func wrapEffects(es *effectStore, local bool) func(server.Store) server.Store {
	return func(s server.Store) server.Store {
		es.Store = s
		if local {
			return localEffectStore{effectStore: es, local: s.(*sqlitestore.Store)}
		}
		return es
	}
}

// createKeyed posts a batch creation under an Idempotency-Key.
func (h *harness) createKeyed(apiKey, idemKey, body string) reply {
	h.t.Helper()
	return h.do(req{method: http.MethodPost, path: "/v1/requests", key: apiKey, body: body, headers: map[string]string{"Idempotency-Key": idemKey}})
}

// createdID is the batch a 2xx creation names in Location, checked against
// the body's request.id.
func createdID(t *testing.T, r reply) string {
	t.Helper()
	id, ok := strings.CutPrefix(r.header.Get("Location"), "/v1/requests/")
	req, _ := r.json(t)["request"].(map[string]any)
	if !ok || id == "" || req["id"] != id {
		t.Fatalf("creation %d names no batch: Location %q, body %s", r.status, r.header.Get("Location"), r.body)
	}
	return id
}

// A batch creation whose batch was stored but whose reply could not be
// (the disk filled between the two writes) answers 5xx and leaves no
// record; its retry under the same key answers with the batch the first
// call made, as a replay, and creates nothing. In both keeper modes.
func TestKeyedCreateLostReply(t *testing.T) {
	for _, local := range []bool{true, false} {
		t.Run(map[bool]string{true: "local", false: "shared"}[local], func(t *testing.T) {
			es := &effectStore{}
			h := start(t, options{wrapStore: wrapEffects(es, local)})
			body := `{"emails":["alice@good.example","bob@good.example"]}`

			es.failReplies.Store(1)
			lost := h.createKeyed(h.testKey, "k-lost", body)
			if lost.status < 500 || lost.errorCode(t) != "unavailable" {
				t.Fatalf("reply write failed: %d %s, want 503", lost.status, lost.body)
			}
			made := es.batches()
			if len(made) != 1 {
				t.Fatalf("the first call made %d batches, want 1 (its reply is what was lost)", len(made))
			}
			for i := range 2 {
				r := h.createKeyed(h.testKey, "k-lost", body)
				if r.status != http.StatusOK || r.header.Get("Idempotent-Replayed") != "true" || r.json(t)["replayed"] != true {
					t.Fatalf("retry %d: %d replayed=%q %s, want the first call's batch as a replay", i+1, r.status, r.header.Get("Idempotent-Replayed"), r.body)
				}
				if id := createdID(t, r); id != made[0] {
					t.Fatalf("retry %d answers batch %s, the first call made %s", i+1, id, made[0])
				}
			}
			if n := len(es.batches()); n != 1 {
				t.Fatalf("%d batches after the retries, want 1", n)
			}
			// The rebuilt reply is now the key's record.
			if r := h.createKeyed(h.testKey, "k-lost", `{"emails":["alice@good.example"]}`); r.status != http.StatusUnprocessableEntity || r.errorCode(t) != "idempotency_key_reused" {
				t.Fatalf("another request under the key: %d %s", r.status, r.body)
			}
			// Another account's use of the key is its own.
			if r := h.createKeyed(h.otherKey, "k-lost", body); r.status != http.StatusCreated || createdID(t, r) == made[0] {
				t.Fatalf("another account: %d %s", r.status, r.body)
			}
			// Once the record expired the key may serve again: a new batch.
			h.clock.Advance(idempotency.Retention + time.Second)
			r := h.createKeyed(h.testKey, "k-lost", body)
			if r.status != http.StatusCreated || createdID(t, r) == made[0] {
				t.Fatalf("the key after %v: %d %s, want a new batch", idempotency.Retention, r.status, r.body)
			}
			if n := len(es.batches()); n != 3 {
				t.Fatalf("%d batches, want 3", n)
			}
		})
	}
}

// keyedBody is the list of creation i: one address, so batches are small
// and many fit before the disk fills.
func keyedBody(i int) string {
	return fmt.Sprintf(`{"emails":["user%d@good.example"]}`, i)
}

// smallDisk mounts a tmpfs of size bytes on a new directory and returns
// it with a function that resizes it; the mount goes at the test's end.
func smallDisk(t *testing.T, size int) (string, func(size int)) {
	t.Helper()
	dir := t.TempDir()
	mount := func(opts string) error {
		out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "evs-test", dir).CombinedOutput()
		if err != nil {
			return fmt.Errorf("mount %s: %v: %s", opts, err, out)
		}
		return nil
	}
	if err := mount(fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("a full disk needs a small file system: %v", err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	return dir, func(size int) {
		if err := mount(fmt.Sprintf("remount,size=%d", size)); err != nil {
			t.Fatal(err)
		}
	}
}

// A real full disk under `evs serve`: keyed creations go on while the
// data directory's file system is full, a few pages at a time made free
// (as a log rotated elsewhere on the disk would), so the disk fills again
// at every point of a call: before its batch, between the batch and its
// reply, after both. Then space returns, the server restarts on the same
// directory and every key is retried. Each key ends with exactly one batch,
// the one its answers name: no key made two.
func TestKeyedCreateDiskFull(t *testing.T) {
	dir, resize := smallDisk(t, 8<<20)
	const keys = 150
	first := &effectStore{}
	h := start(t, options{dir: dir, wrapStore: wrapEffects(first, true)})
	filler := fillDisk(t, filepath.Join(dir, "filler"))
	answered := make(map[int]string) // key → the batch a 201 named
	failed := 0
	for i := range keys {
		r := h.createKeyed(h.testKey, fmt.Sprintf("disk-%d", i), keyedBody(i))
		switch {
		case r.status == http.StatusCreated:
			answered[i] = createdID(t, r)
		case r.status >= 500:
			failed++
			filler.free(t, int64(1+i%4)*4096)
		default:
			t.Fatalf("creation %d: %d %s", i, r.status, r.body)
		}
	}
	lost := len(first.batches()) - len(answered)
	if lost == 0 {
		t.Fatalf("%d creations on a full disk, %d refused: none lost its reply after its batch, so the test shows nothing", keys, failed)
	}
	t.Logf("disk full: %d created and answered, %d refused, %d created with the reply lost", len(answered), failed, lost)

	resize(64 << 20)
	filler.remove(t)
	h.stop()
	if err := h.st.Close(); err != nil {
		t.Fatal(err)
	}
	second := &effectStore{}
	h = start(t, options{dir: dir, wrapStore: wrapEffects(second, true)})
	final := make(map[string]int) // batch → key
	for i := range keys {
		r := h.createKeyed(h.testKey, fmt.Sprintf("disk-%d", i), keyedBody(i))
		if r.status != http.StatusCreated && r.status != http.StatusOK {
			t.Fatalf("retry of key %d: %d %s", i, r.status, r.body)
		}
		id := createdID(t, r)
		if prev, ok := answered[i]; ok && id != prev {
			t.Errorf("key %d: first answered %s, now %s", i, prev, id)
		}
		if other, dup := final[id]; dup {
			t.Errorf("keys %d and %d answer the same batch %s", other, i, id)
		}
		final[id] = i
	}
	made := append(first.batches(), second.batches()...)
	for _, id := range made {
		if _, ok := final[id]; !ok {
			t.Errorf("batch %s was created but no key answers it: a duplicate", id)
		}
	}
	if len(made) != keys {
		t.Fatalf("%d batches for %d keys, want exactly one each", len(made), keys)
	}
}

// filler is a file that takes what a file system has left.
type filler struct {
	f    *os.File
	size int64
}

// fillDisk writes path until the file system is full.
func fillDisk(t *testing.T, path string) *filler {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	fl := &filler{f: f}
	for {
		n, err := f.Write(chunk)
		fl.size += int64(n)
		if errors.Is(err, syscall.ENOSPC) {
			return fl
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// free gives n bytes back to the file system.
func (fl *filler) free(t *testing.T, n int64) {
	t.Helper()
	fl.size = max(0, fl.size-n)
	if err := fl.f.Truncate(fl.size); err != nil {
		t.Fatal(err)
	}
}

func (fl *filler) remove(t *testing.T) {
	t.Helper()
	if err := errors.Join(fl.f.Close(), os.Remove(fl.f.Name())); err != nil {
		t.Fatal(err)
	}
}
