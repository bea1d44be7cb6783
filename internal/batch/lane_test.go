package batch_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/politeness"
	"github.com/evs-dev/evs/internal/verify"
)

// The large provider's lane of the 1,000,000-address list (docs/aws.md,
// "Cost of 1,000,000 addresses"): 400,000 addresses at one domain of a
// large provider (300 RCPT a minute per egress address, 10 sessions), in
// work messages of 200, run by the real Worker as on AWS (parked work,
// wakes, session ends that start what waits; RCPT budgets in fixed
// windows, as DynamoDB keeps them) through 1, 2 and 4 SOCKS exits, on a
// synctest bubble's clock: a day of the provider's time in seconds of
// ours. The provider answers every reply in 0.5 s. The other 600,000
// addresses are on providers of their own, with budgets of their own:
// they do not share this lane.

// laneMX sends every domain to the large provider.
type laneMX struct{}

func (laneMX) PreferredMX(context.Context, string) (string, bool) {
	return "gmail-smtp-in.l.google.com", true
}

// laneEngine is the provider: every address exists, each session takes
// a reply time per reply (banner, EHLO, MAIL, each RCPT, the accept-all
// probe, QUIT) on the bubble's clock, and the RCPT commands are counted
// per exit the session went through (the exits' own choice for ctx).
type laneEngine struct {
	reply time.Duration
	exits *verify.Exits
	mu    sync.Mutex
	rcpts map[int]int
}

func (e *laneEngine) VerifyDomain(ctx context.Context, emails []string, _ evs.Mode) []evs.Decision {
	time.Sleep(time.Duration(len(emails)+5) * e.reply)
	e.mu.Lock()
	e.rcpts[e.exits.Through(ctx, "gmail-smtp-in.l.google.com")] += len(emails) + 1
	e.mu.Unlock()
	ds := make([]evs.Decision, len(emails))
	for i, m := range emails {
		ds[i] = evs.Decision{Email: m, Reason: evs.ReasonAcceptedEmail,
			Checks: evs.Checks{SMTP: evs.SMTPCheck{Result: evs.SMTPAccepted, Code: 250, CatchAll: evs.SMTPRejected}}}
	}
	return ds
}

// windows is a politeness.State whose RCPT budget is kept in fixed
// windows, as dynamostore.Store keeps it (its TestRcptBudget holds it to
// the same rule); slots and pauses in memory.
type windows struct {
	politeness.State
	mu   sync.Mutex
	used map[string]map[int64]int // key → window start (ms) → reserved
}

func (w *windows) ReserveRcpts(_ context.Context, key string, least, most, limit int, window time.Duration, now time.Time) (int, time.Time, error) {
	start := now.Truncate(window)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.used[key] == nil {
		w.used[key] = map[int64]int{}
	}
	got := min(most, limit-w.used[key][start.UnixMilli()])
	if got < least {
		return 0, start.Add(window), nil
	}
	w.used[key][start.UnixMilli()] += got
	return got, start.Add(window), nil
}

// laneStore keeps one batch's counters and which items have results.
type laneStore struct {
	mu   sync.Mutex
	b    evs.Batch
	done []bool
	all  chan struct{} // closed when every item has a result
}

func (s *laneStore) Batch(context.Context, string, string) (evs.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b, nil
}

func (s *laneStore) TransitionBatch(context.Context, string, string, []evs.State, evs.State, string, time.Time) (evs.Batch, error) {
	return s.Batch(context.Background(), "", "")
}

func (s *laneStore) PutResults(_ context.Context, _, _ string, rs []evs.Result, _ time.Time) (evs.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rs {
		if !s.done[r.Seq] {
			s.done[r.Seq] = true
			s.b.Counters.Processed++
		}
	}
	if s.b.Counters.Processed == len(s.done) && s.b.State != evs.StateCompleted {
		s.b.State = evs.StateCompleted
		close(s.all)
	}
	return s.b, nil
}

func (s *laneStore) InputItems(context.Context, string, string, int, int) ([]evs.Item, int, error) {
	return nil, -1, nil // not planned here: the work messages are sent as the planner sends them
}

func (s *laneStore) WithoutResults(_ context.Context, _, _ string, items []evs.Item) ([]evs.Item, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []evs.Item
	for _, it := range items {
		if !s.done[it.Seq] {
			out = append(out, it)
		}
	}
	return out, nil
}

func (s *laneStore) Account(_ context.Context, id string) (evs.Account, error) {
	return evs.Account{ID: id}, nil
}

// laneQueue is SQS on the bubble's clock: a message is handed out once
// its delay has passed.
type laneQueue struct {
	ctx   context.Context
	ready chan batch.Message
}

func (q *laneQueue) Send(_ context.Context, ms []batch.Message, delay time.Duration) error {
	for _, m := range ms {
		time.AfterFunc(delay, func() {
			select {
			case q.ready <- m:
			case <-q.ctx.Done():
			}
		})
	}
	return nil
}

func (q *laneQueue) MaxDelay() time.Duration  { return batch.MaxDelay }
func (q *laneQueue) DelayUnit() time.Duration { return time.Second }
func (q *laneQueue) Redelivers() bool         { return true }
func (q *laneQueue) SharedSlots() bool        { return false }

// laneRun is what one run of the lane measured.
type laneRun struct {
	took    time.Duration
	rcpts   map[int]int // sent, per exit
	handled int         // messages handled
	// windows is the RCPT commands reserved per key and window, in order.
	windows map[string][]int
}

// runLane runs n addresses of the lane through exits exits.
func runLane(t *testing.T, n, exits int) (r laneRun) {
	synctest.Test(t, func(t *testing.T) {
		var urls []string
		for i := range exits {
			urls = append(urls, fmt.Sprintf("socks5://10.0.0.%d:1080", i+1))
		}
		list, err := config.ParseSMTPExits(strings.Join(urls, ","))
		if err != nil {
			t.Fatal(err)
		}
		x, err := verify.NewExits(config.Config{SMTPExits: list}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st := &laneStore{b: evs.Batch{ID: "b", AccountID: "a", Mode: evs.ModeFull, State: evs.StateRunning, CreatedAt: time.Now(),
			Counters: evs.Counters{Total: n}}, done: make([]bool, n), all: make(chan struct{})}
		q := &laneQueue{ctx: ctx, ready: make(chan batch.Message, 1<<16)}
		state := &windows{State: politeness.NewMemoryState(nil), used: map[string]map[int64]int{}}
		engine := &laneEngine{reply: 500 * time.Millisecond, exits: x, rcpts: map[int]int{}}
		w := &batch.Worker{
			Queue: q, Store: st, Accounts: st, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
			// The worker function's settings (functions/worker).
			Processor: &batch.Processor{Engine: engine, SessionLimit: time.Minute, GroupSessions: 2},
			Polite: &batch.Polite{Parking: newMemParking(), Gate: &politeness.Gate{
				State: state, MX: laneMX{}, Exits: x.Order,
			}},
		}
		items := make([]evs.Item, n)
		for i := range items {
			items[i] = evs.Item{Seq: i, Email: fmt.Sprintf("user%d@big.example", i), Domain: "big.example"}
		}
		start := time.Now()
		if err := q.Send(ctx, batch.Pack("a", "b", items, 200), 0); err != nil {
			t.Fatal(err)
		}
		// 20 invocations at once (WorkerMaxConcurrency), 10 messages each.
		var wg sync.WaitGroup
		var handled atomic.Int64
		for range 200 {
			wg.Go(func() {
				for {
					select {
					case m := <-q.ready:
						handled.Add(1)
						if err := w.Handle(ctx, m, false, time.Time{}); err != nil {
							t.Errorf("%s: %v", m.Kind, err)
						}
					case <-ctx.Done():
						return
					}
				}
			})
		}
		select {
		case <-st.all:
		case <-time.After(72 * time.Hour):
			t.Errorf("after 72 h: %+v; parked:%s", st.b.Counters, w.Polite.Parking)
		}
		r.took = time.Since(start)
		cancel()
		wg.Wait()
		r.rcpts, r.handled = engine.rcpts, int(handled.Load())
		r.windows = map[string][]int{}
		for k, ws := range state.used {
			for at := start; at.Before(start.Add(r.took)); at = at.Add(time.Minute) {
				r.windows[k] = append(r.windows[k], ws[at.UnixMilli()])
			}
		}
	})
	return r
}

// laneFull runs the whole lane, 400,000 addresses, beside the tenth:
// not under the race detector, where it takes minutes.
var laneFull = true

// TestLaneSpendsTheBudget: the lane reserves at least 95 % of its RCPT
// budget in every window while it has work waiting (a window's budget or
// more is reserved after it), on every exit, and sends no more than it
// reserved; so N exits take 1/N of the time. 6,000 addresses through 1, 2 and 4 exits; without -short (and
// the race detector), 400,000 through 2 exits, which must finish within
// the batch's 24 h.
func TestLaneSpendsTheBudget(t *testing.T) {
	t.Parallel()
	type run struct{ n, exits int }
	runs := []run{{6_000, 1}, {6_000, 2}, {6_000, 4}}
	if laneFull && !testing.Short() {
		runs = append(runs, run{400_000, 2})
	}
	for _, c := range runs {
		r := runLane(t, c.n, c.exits)
		if len(r.windows) != c.exits {
			t.Errorf("%d exits: RCPT commands reserved on %d", c.exits, len(r.windows))
		}
		// after[i] is what the lane reserved after minute i: while that
		// is a whole minute's budget or more, the lane has work waiting.
		reserved, sent, minutes := 0, 0, int(r.took/time.Minute)+1
		after := make([]int, minutes)
		for _, ws := range r.windows {
			for i, n := range ws {
				reserved += n
				for j := range i {
					after[j] += n
				}
			}
		}
		for k, ws := range r.windows {
			for i, n := range ws {
				if n < 285 && after[i] >= 300*c.exits {
					t.Errorf("%d exits: %s reserved %d RCPT commands of 300 in minute %d of %d, %d to come", c.exits, k, n, i+1, len(ws), after[i])
				}
			}
		}
		for _, n := range r.rcpts {
			sent += n
		}
		if sent > reserved || sent < c.n {
			t.Errorf("%d exits: %d RCPT commands sent for %d addresses, %d reserved", c.exits, sent, c.n, reserved)
		}
		if c.n == 400_000 && r.took > 24*time.Hour {
			t.Errorf("%d exits: %s for 400,000 addresses, past the 24 h deadline", c.exits, r.took)
		}
		t.Logf("%d addresses, %d exits: %.2f h, %d RCPT commands sent (per exit %v), %.1f %% of the budget; %d messages handled",
			c.n, c.exits, r.took.Hours(), sent, r.rcpts, 100*float64(sent)/(300*float64(c.exits)*r.took.Minutes()), r.handled)
	}
}
