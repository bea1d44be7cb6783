package dynamostore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/testkit"
)

// effects wraps the DynamoDB store as the requests function uses it, and
// fails, once each, what a test asks: the write of an idempotent reply,
// or a read of a batch that answers "not found" though it exists (the
// window where another creation of the same ID is under way).
type effects struct {
	*dynamostore.Store
	failComplete, hideBatch atomic.Bool

	testkit.BatchLog
}

func (e *effects) CreateBatchWithin(ctx context.Context, b evs.Batch, items []evs.Item, maxActive int) error {
	return e.Created(b.ID, e.Store.CreateBatchWithin(ctx, b, items, maxActive))
}

func (e *effects) CompleteIdempotency(ctx context.Context, scope string, status int, h map[string]string, body []byte) error {
	if e.failComplete.CompareAndSwap(true, false) {
		return evs.Wrap(errors.New("ProvisionedThroughputExceededException"), evs.CodeUnavailable, "The store is unavailable.")
	}
	return e.Store.CompleteIdempotency(ctx, scope, status, h, body)
}

func (e *effects) Batch(ctx context.Context, accountID, id string) (evs.Batch, error) {
	if e.hideBatch.CompareAndSwap(true, false) {
		return evs.Batch{}, evs.Errorf(evs.CodeNotFound, "No such request.")
	}
	return e.Store.Batch(ctx, accountID, id)
}

// flakyQueue refuses the next batch while down is set, as SQS can.
type flakyQueue struct{ down atomic.Bool }

func (q *flakyQueue) Enqueue(ctx context.Context, b evs.Batch) error {
	if q.down.CompareAndSwap(true, false) {
		return errors.New("sqs: service unavailable")
	}
	return nil
}

// keyedCreate is POST /v1/requests under an Idempotency-Key through the
// requests function's handler, as API Gateway delivers it.
func keyedCreate(t *testing.T, h *api.Handler, acct, key, body string) (events.APIGatewayProxyResponse, string) {
	t.Helper()
	ev := events.APIGatewayProxyRequest{
		Resource: "/v1/requests", Path: "/v1/requests", HTTPMethod: http.MethodPost, Body: body,
		Headers: map[string]string{"Content-Type": "application/json", "Idempotency-Key": key},
		RequestContext: events.APIGatewayProxyRequestContext{
			RequestID: "rid-" + key, ResourcePath: "/v1/requests", HTTPMethod: http.MethodPost,
			Authorizer: map[string]any{"accountId": acct, "keyId": "k1", "testMode": "true"},
		},
	}
	r, err := lambda.Proxy(api.Mux(api.ObserveOptions{}, h.MountAll(nil)))(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := strings.CutPrefix(r.Headers["Location"], "/v1/requests/")
	if r.StatusCode < 300 {
		var env struct {
			Request struct {
				ID string `json:"id"`
			} `json:"request"`
			Replayed bool `json:"replayed"`
		}
		if err := json.Unmarshal([]byte(r.Body), &env); err != nil || env.Request.ID != id || id == "" {
			t.Fatalf("creation %d names no batch: Location %q, body %s", r.StatusCode, r.Headers["Location"], r.Body)
		}
		if replayed := r.Headers[idempotency.ReplayedHeader] == "true"; replayed != env.Replayed || replayed != (r.StatusCode == http.StatusOK) {
			t.Fatalf("creation %d: Idempotent-Replayed %q, body replayed %v", r.StatusCode, r.Headers[idempotency.ReplayedHeader], env.Replayed)
		}
	}
	return r, id
}

// On DynamoDB too, a batch creation under an Idempotency-Key has exactly
// one effect however its first call failed: retried with the same key, it
// answers with the batch the first call made (a replay, nothing charged),
// or makes the batch if the first made none that counts.
func TestKeyedCreateExactlyOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// fault arms the failure of the first call.
		fault func(e *effects, q *flakyQueue)
		// first is the first call's status; made how many batches it left.
		first int
		made  int
		// retry is the retry's status: 200 answers with the first call's
		// batch, 201 makes the only one that counts.
		retry int
	}{
		{name: "reply lost", fault: func(e *effects, q *flakyQueue) { e.failComplete.Store(true) }, first: 503, made: 1, retry: 200},
		// The batch exists but a read misses it: creating it again fails
		// on its ID, which is read as the earlier call's batch.
		{name: "existing batch unseen", fault: func(e *effects, q *flakyQueue) { e.failComplete.Store(true) }, first: 503, made: 1, retry: 200},
		// The batch was stored, then failed unverified as the queue
		// refused it: the client was told so (503), and the retry makes
		// the batch that runs.
		{name: "queue down", fault: func(e *effects, q *flakyQueue) { q.down.Store(true) }, first: 503, made: 1, retry: 201},
	}
	for _, tt := range tests {
		for _, maxActive := range []int{0, 5} {
			t.Run(fmt.Sprintf("%s/maxActive=%d", tt.name, maxActive), func(t *testing.T) {
				clock := testkit.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
				e := &effects{Store: newStore(t, clock.Now)}
				q := &flakyQueue{}
				h := api.New(api.Deps{
					Idempotency: idempotency.New(e, clock.Now), Batches: e, Queue: q, Now: clock.Now,
					MaxActiveBatches: maxActive,
					Quota:            api.Quota{Store: e, Limit: 4, Period: api.QuotaDay},
				})
				const acct = "acct-keyed"
				body := `{"emails":["a@x.example","b@x.example"]}`

				tt.fault(e, q)
				r, _ := keyedCreate(t, h, acct, "k", body)
				if r.StatusCode != tt.first || len(e.IDs()) != tt.made {
					t.Fatalf("first call: %d %s, %d batches; want %d, %d", r.StatusCode, r.Body, len(e.IDs()), tt.first, tt.made)
				}
				if tt.name == "existing batch unseen" {
					e.hideBatch.Store(true)
				}
				r, id := keyedCreate(t, h, acct, "k", body)
				if r.StatusCode != tt.retry {
					t.Fatalf("retry: %d %s, want %d", r.StatusCode, r.Body, tt.retry)
				}
				if tt.retry == http.StatusOK && id != e.IDs()[0] {
					t.Fatalf("retry answers %s, the first call made %s", id, e.IDs()[0])
				}
				// Again: the key's record now answers, with the same batch.
				if again, id2 := keyedCreate(t, h, acct, "k", body); again.StatusCode != http.StatusOK || id2 != id {
					t.Fatalf("second retry: %d %s, want a replay of %s", again.StatusCode, again.Body, id)
				}
				if n, err := e.ActiveBatches(context.Background(), acct); err != nil || n != 1 {
					t.Fatalf("%d active batches (%v), want exactly 1", n, err)
				}
				// The quota (4 addresses a day) was charged 2, once: 2 are left.
				if r, _ := keyedCreate(t, h, acct, "k2", body); r.StatusCode != http.StatusCreated {
					t.Fatalf("the 2 addresses left: %d %s", r.StatusCode, r.Body)
				}
				if r, _ := keyedCreate(t, h, acct, "k3", `{"emails":["c@x.example"]}`); r.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("over the quota: %d %s", r.StatusCode, r.Body)
				}
				// After its record expired the key makes a new batch.
				clock.Advance(idempotency.Retention + time.Second)
				if r, id3 := keyedCreate(t, h, acct, "k", body); r.StatusCode != http.StatusCreated || id3 == id {
					t.Fatalf("the key after %v: %d %s", idempotency.Retention, r.StatusCode, r.Body)
				}
			})
		}
	}
}
