package server_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
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

	testkit.BatchLog
}

func (e *effectStore) CreateBatchWithin(ctx context.Context, b evs.Batch, items []evs.Item, maxActive int) error {
	return e.Created(b.ID, e.Store.CreateBatchWithin(ctx, b, items, maxActive))
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
			made := es.IDs()
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
			if n := len(es.IDs()); n != 1 {
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
			if n := len(es.IDs()); n != 3 {
				t.Fatalf("%d batches, want 3", n)
			}
		})
	}
}
