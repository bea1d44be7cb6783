package batch_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/politeness"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/verify"
)

// TestWorkerGroupSessionsWithinProviderLimit: the AWS worker's path (a
// work message, politeness with parked work) runs a 200-address group's
// two sessions at once only while its provider has a session slot for
// each: with one slot they run one after another, as before.
func TestWorkerGroupSessionsWithinProviderLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		slots, wantOpen int
	}{{3, 2}, {1, 1}} {
		t.Run(fmt.Sprintf("%d slots", tc.slots), func(t *testing.T) {
			ctx := context.Background()
			peer, eng := slowPeer(t, 2*time.Millisecond)
			st, err := sqlitestore.Open(ctx, t.TempDir(), time.Now)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			q := &memQueue{}
			w := &batch.Worker{
				Queue: q, Store: st, Accounts: st,
				Processor: &batch.Processor{Engine: eng, Sandbox: verify.NewSandbox(nil), GroupSessions: 2},
				Logger:    slog.New(slog.NewJSONHandler(io.Discard, nil)),
				Polite: &batch.Polite{Parking: newMemParking(), Gate: &politeness.Gate{
					State: politeness.NewMemoryState(nil), MX: eng, Egress: "test",
					Limits: politeness.Limits{Sessions: map[string]int{"*": tc.slots}, RcptPerMin: map[string]int{"*": 1000}},
				}},
			}
			acct := evs.Account{ID: fmt.Sprintf("a-%d", tc.slots), Name: fmt.Sprintf("n-%d", tc.slots), CreatedAt: time.Now()}
			if err := st.CreateAccount(ctx, acct); err != nil {
				t.Fatal(err)
			}
			var items []evs.Item
			for i := range 200 {
				items = append(items, evs.Item{Seq: i, Email: fmt.Sprintf("yes%d@slow.example", i), Domain: "slow.example"})
			}
			now := time.Now()
			b := evs.Batch{ID: "00000000-0000-4000-8000-000000000001", AccountID: acct.ID, Mode: evs.ModeFull, State: evs.StateRunning,
				CreatedAt: now, ExpiresAt: now.Add(time.Hour), Counters: evs.Counters{Total: len(items)}}
			if err := st.CreateBatch(ctx, b, items); err != nil {
				t.Fatal(err)
			}
			m := batch.Message{Kind: batch.KindWork, AccountID: acct.ID, BatchID: b.ID, Items: items}
			if err := w.Handle(ctx, m, false, time.Time{}); err != nil {
				t.Fatal(err)
			}
			got, err := st.Batch(ctx, acct.ID, b.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Counters.Deliverable != len(items) || got.State != evs.StateCompleted {
				t.Fatalf("%s %+v; queued: %s", got.State, got.Counters, q)
			}
			if open := peer.MaxConcurrent(); open != tc.wantOpen {
				t.Fatalf("%d sessions open at once with %d slots for the provider, want %d", open, tc.slots, tc.wantOpen)
			}
		})
	}
}
