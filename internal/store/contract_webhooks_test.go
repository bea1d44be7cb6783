package store_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// runWebhooks checks signing secrets and batch event deliveries.
func runWebhooks(t *testing.T, newStore storeFactory) {
	t.Run("Secrets", func(t *testing.T) {
		e := newEnv(t, newStore)
		_, err := e.st.WebhookSecret(e.ctx, "acct-1")
		wantCode(t, err, evs.CodeNotFound, "WebhookSecret before any")
		first := evs.WebhookSecret{AccountID: "acct-1", Current: "whsec_one"}
		must(t, e.st.PutWebhookSecret(e.ctx, first, ""), "PutWebhookSecret first")
		wantCode(t, e.st.PutWebhookSecret(e.ctx, evs.WebhookSecret{AccountID: "acct-1", Current: "whsec_dup"}, ""),
			evs.CodeInvalidState, "a second first secret")
		rotated := evs.WebhookSecret{AccountID: "acct-1", Current: "whsec_two",
			Retired: []evs.RetiredSecret{{Secret: "whsec_one", RetiredAt: base}}}
		wantCode(t, e.st.PutWebhookSecret(e.ctx, rotated, "whsec_wrong"), evs.CodeInvalidState, "rotation from a stale secret")
		must(t, e.st.PutWebhookSecret(e.ctx, rotated, "whsec_one"), "rotation")
		got, err := e.st.WebhookSecret(e.ctx, "acct-1")
		must(t, err, "WebhookSecret")
		if got.AccountID != "acct-1" || got.Current != "whsec_two" || len(got.Retired) != 1 || got.Retired[0].Secret != "whsec_one" {
			t.Fatalf("WebhookSecret = %+v", got)
		}
		sameTime(t, "RetiredAt", got.Retired[0].RetiredAt, base)
		_, err = e.st.WebhookSecret(e.ctx, "acct-2")
		wantCode(t, err, evs.CodeNotFound, "another account's secret")
	})

	// Of concurrent writes from the same current secret exactly one is
	// stored: what lets webhook.Rotate serialise rotations.
	t.Run("ConcurrentPutsOneWins", func(t *testing.T) {
		e := newEnv(t, newStore)
		must(t, e.st.PutWebhookSecret(e.ctx, evs.WebhookSecret{AccountID: "acct-1", Current: "whsec_one"}, ""), "first secret")
		const n = 6
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			won    []string
			others []error
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := evs.WebhookSecret{AccountID: "acct-1", Current: fmt.Sprintf("whsec_new%d", i),
					Retired: []evs.RetiredSecret{{Secret: "whsec_one", RetiredAt: base}, {Secret: "whsec_zero", RetiredAt: base.Add(-time.Hour)}}}
				err := e.st.PutWebhookSecret(e.ctx, w, "whsec_one")
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					won = append(won, w.Current)
				} else {
					others = append(others, err)
				}
			}()
		}
		wg.Wait()
		if len(won) != 1 {
			t.Fatalf("%d of %d concurrent rotations from the same secret were stored, want 1", len(won), n)
		}
		for _, err := range others {
			wantCode(t, err, evs.CodeInvalidState, "a rotation that lost the race")
		}
		got, err := e.st.WebhookSecret(e.ctx, "acct-1")
		must(t, err, "WebhookSecret")
		if got.Current != won[0] || len(got.Retired) != 2 || got.Retired[0].Secret != "whsec_one" || got.Retired[1].Secret != "whsec_zero" {
			t.Fatalf("stored %+v, want the winner with both retired secrets in order", got)
		}
		sameTime(t, "Retired[1].RetiredAt", got.Retired[1].RetiredAt, base.Add(-time.Hour))
	})

	withCallbackOf := func(t *testing.T, e *env, acct, id string, n int) evs.Batch {
		t.Helper()
		b, items := newBatch(id, acct, n, 0)
		b.CallbackURL = "https://hooks.example.com/evs?batch=" + id
		must(t, e.st.CreateBatch(e.ctx, b, items), "CreateBatch with callback")
		return b
	}
	withCallback := func(t *testing.T, e *env, id string, n int) evs.Batch {
		t.Helper()
		return withCallbackOf(t, e, "acct-1", id, n)
	}

	t.Run("DeliveryBecomesPendingWithTheFinalState", func(t *testing.T) {
		for _, c := range []struct {
			name  string
			final func(e *env, b evs.Batch) error
		}{
			{"cancelled", func(e *env, b evs.Batch) error {
				_, err := e.st.TransitionBatch(e.ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued}, evs.StateCancelled, "", base)
				return err
			}},
			{"failed", func(e *env, b evs.Batch) error {
				_, err := e.st.TransitionBatch(e.ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued}, evs.StateFailed, "gave up", base)
				return err
			}},
			{"completed by the last result", func(e *env, b evs.Batch) error {
				_, err := e.st.PutResults(e.ctx, b.AccountID, b.ID, results(statusOf, 0, 1), base)
				return err
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				e := newEnv(t, newStore)
				b := withCallback(t, e, "batch-cb", 2)
				_, err := e.st.Delivery(e.ctx, b.AccountID, b.ID)
				wantCode(t, err, evs.CodeNotFound, "Delivery before the batch is final")
				_, err = e.st.ClaimDelivery(e.ctx, b.AccountID, b.ID, 0, base, base.Add(time.Minute))
				wantCode(t, err, evs.CodeInvalidState, "ClaimDelivery before the batch is final")
				must(t, c.final(e, b), "final step")
				d, err := e.st.Delivery(e.ctx, b.AccountID, b.ID)
				must(t, err, "Delivery")
				if d.State != evs.CallbackPending || d.Attempts != 0 || d.LastStatus != 0 || d.URL != b.CallbackURL ||
					d.AccountID != b.AccountID || d.BatchID != b.ID || d.NextAt.After(base) {
					t.Errorf("Delivery after the final state = %+v", d)
				}
				if due, ok := e.st.(store.DueDeliveries); ok {
					list, err := due.DueDeliveries(e.ctx, base, 0, 10)
					must(t, err, "DueDeliveries")
					if len(list) != 1 || list[0].BatchID != b.ID {
						t.Errorf("DueDeliveries = %+v, want the one batch", list)
					}
				}
				_, err = e.st.Delivery(e.ctx, "acct-2", b.ID)
				wantCode(t, err, evs.CodeNotFound, "another account's delivery")
			})
		}
	})

	t.Run("NoCallbackNoDelivery", func(t *testing.T) {
		e := newEnv(t, newStore)
		b, _ := e.create(t, "batch-plain", "acct-1", 1, 0)
		e.transition(t, b, evs.StateCancelled, "", base)
		_, err := e.st.Delivery(e.ctx, b.AccountID, b.ID)
		wantCode(t, err, evs.CodeNotFound, "Delivery of a batch without callback")
		if due, ok := e.st.(store.DueDeliveries); ok {
			list, err := due.DueDeliveries(e.ctx, base.Add(time.Hour), 0, 10)
			must(t, err, "DueDeliveries")
			if len(list) != 0 {
				t.Errorf("DueDeliveries = %+v, want none", list)
			}
		}
	})

	t.Run("ClaimAndRecord", func(t *testing.T) {
		e := newEnv(t, newStore)
		b := withCallback(t, e, "batch-cb", 1)
		_, err := e.st.TransitionBatch(e.ctx, b.AccountID, b.ID, []evs.State{evs.StateQueued}, evs.StateCancelled, "", base)
		must(t, err, "cancel")
		lease := base.Add(15 * time.Second)
		d, err := e.st.ClaimDelivery(e.ctx, b.AccountID, b.ID, 0, base, lease)
		must(t, err, "ClaimDelivery 1")
		if d.Attempts != 1 || !d.NextAt.Equal(lease) || d.State != evs.CallbackPending {
			t.Errorf("claimed %+v", d)
		}
		_, err = e.st.ClaimDelivery(e.ctx, b.AccountID, b.ID, 0, base, lease)
		wantCode(t, err, evs.CodeInvalidState, "the same attempt claimed twice")
		_, err = e.st.ClaimDelivery(e.ctx, b.AccountID, b.ID, 1, base.Add(time.Second), lease)
		wantCode(t, err, evs.CodeInvalidState, "a claim within the lease")
		d.LastStatus, d.NextAt = 503, base.Add(5*time.Second)
		must(t, e.st.RecordDelivery(e.ctx, d), "RecordDelivery 1")
		// A worker whose lease ran out records too late: refused.
		d2, err := e.st.ClaimDelivery(e.ctx, b.AccountID, b.ID, 1, base.Add(5*time.Second), base.Add(20*time.Second))
		must(t, err, "ClaimDelivery 2")
		stale := d
		wantCode(t, e.st.RecordDelivery(e.ctx, stale), evs.CodeInvalidState, "record of a superseded attempt")
		d2.State, d2.LastStatus = evs.CallbackDelivered, 204
		must(t, e.st.RecordDelivery(e.ctx, d2), "RecordDelivery 2")
		got, err := e.st.Delivery(e.ctx, b.AccountID, b.ID)
		must(t, err, "Delivery")
		if got.State != evs.CallbackDelivered || got.Attempts != 2 || got.LastStatus != 204 {
			t.Errorf("Delivery = %+v", got)
		}
		wantCode(t, e.st.RecordDelivery(e.ctx, d2), evs.CodeInvalidState, "record after delivered")
		_, err = e.st.ClaimDelivery(e.ctx, b.AccountID, b.ID, 2, base.Add(time.Hour), base.Add(2*time.Hour))
		wantCode(t, err, evs.CodeInvalidState, "claim after delivered")
		if due, ok := e.st.(store.DueDeliveries); ok {
			list, err := due.DueDeliveries(e.ctx, base.Add(time.Hour), 0, 10)
			must(t, err, "DueDeliveries")
			if len(list) != 0 {
				t.Errorf("DueDeliveries after delivery = %+v", list)
			}
		}
	})

	t.Run("DueOrder", func(t *testing.T) {
		e := newEnv(t, newStore)
		due, ok := e.st.(store.DueDeliveries)
		if !ok {
			t.Skip("the store has no delivery loop (AWS: SQS delays time the attempts)")
		}
		a := withCallback(t, e, "batch-a", 1)
		b := withCallback(t, e, "batch-b", 1)
		for _, x := range []evs.Batch{a, b} {
			_, err := e.st.TransitionBatch(e.ctx, x.AccountID, x.ID, []evs.State{evs.StateQueued}, evs.StateCancelled, "", base)
			must(t, err, "cancel")
		}
		d, err := e.st.ClaimDelivery(e.ctx, a.AccountID, a.ID, 0, base, base.Add(time.Second))
		must(t, err, "claim a")
		d.NextAt = base.Add(time.Minute)
		must(t, e.st.RecordDelivery(e.ctx, d), "record a")
		list, err := due.DueDeliveries(e.ctx, base.Add(time.Second), 0, 10)
		must(t, err, "DueDeliveries")
		if len(list) != 1 || list[0].BatchID != "batch-b" {
			t.Errorf("due now = %+v, want batch-b only", list)
		}
		list, err = due.DueDeliveries(e.ctx, base.Add(time.Minute), 0, 10)
		must(t, err, "DueDeliveries later")
		if len(list) != 2 || list[0].BatchID != "batch-b" {
			t.Errorf("due in a minute = %+v, want batch-b then batch-a", list)
		}
	})

	// A hog account's many due deliveries do not hide another account's:
	// the listing takes each account's earliest in turn.
	t.Run("DueFairAcrossAccounts", func(t *testing.T) {
		e := newEnv(t, newStore)
		due, ok := e.st.(store.DueDeliveries)
		if !ok {
			t.Skip("the store has no delivery loop (AWS: SQS delays time the attempts)")
		}
		var all []evs.Batch
		for i := range 5 {
			all = append(all, withCallbackOf(t, e, "acct-hog", fmt.Sprintf("hog-%d", i), 1))
		}
		all = append(all, withCallbackOf(t, e, "acct-other", "other-0", 1))
		for i, x := range all {
			_, err := e.st.TransitionBatch(e.ctx, x.AccountID, x.ID, []evs.State{evs.StateQueued}, evs.StateCancelled, "", base)
			must(t, err, "cancel")
			// Make the hog's due earliest: other-0 comes last by time.
			d, err := e.st.ClaimDelivery(e.ctx, x.AccountID, x.ID, 0, base, base.Add(time.Duration(i+1)*time.Second))
			must(t, err, "claim")
			d.NextAt = base.Add(time.Duration(i+1) * time.Second)
			must(t, e.st.RecordDelivery(e.ctx, d), "record")
		}
		at := base.Add(time.Minute)
		list, err := due.DueDeliveries(e.ctx, at, 2, 3)
		must(t, err, "DueDeliveries")
		var ids []string
		for _, d := range list {
			ids = append(ids, d.BatchID)
		}
		if got := strings.Join(ids, ","); got != "hog-0,other-0,hog-1" {
			t.Errorf("DueDeliveries(perAccount 2, limit 3) = %s, want hog-0,other-0,hog-1", got)
		}
		list, err = due.DueDeliveries(e.ctx, at, 0, 10)
		must(t, err, "DueDeliveries unbounded per account")
		if len(list) != 6 {
			t.Errorf("DueDeliveries(no bound per account) lists %d, want 6", len(list))
		}
	})
}
