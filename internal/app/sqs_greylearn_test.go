package app_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// TestWorkerLearnsGreyDelay: the worker learns, per domain, how long the
// loopback MTA greylists a new address before a retry gets through, and
// keeps it in DynamoDB; a later batch, run by an instance with a memory of
// its own, sends its first retry there with that delay (capped at SQS's
// 15 min), so each address takes fewer RCPTs. The MTA's greylisting runs
// on a test clock that the test moves by each resend's SQS delay, as SQS
// would, instead of waiting minutes.
func TestWorkerLearnsGreyDelay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		greylist   time.Duration // how long the MTA defers a new address
		backoff    time.Duration
		maxGrey    int
		first      []int32 // SQS delays of the first batch's resends
		second     []int32 // and of the second's
		rcptFirst  int     // RCPTs per address in the first batch
		rcptSecond int     // and in the second
	}{
		// 0 s, 120 s, 360 s: learned 360 s, which the next batch waits at once.
		{"learned delay", 5 * time.Minute, 2 * time.Minute, 4, []int32{120, 240}, []int32{360}, 3, 2},
		// 0 s, 300 s, 900 s, 1800 s: learned 30 min, over SQS's cap, so
		// 900 s, then the back-off's 600 s.
		{"capped at 15 min", 20 * time.Minute, 5 * time.Minute, 5, []int32{300, 600, 900}, []int32{900, 600}, 4, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 200, tc.backoff, tc.maxGrey)
			clock := testkit.NewClock(time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC))
			var (
				mu    sync.Mutex
				first = map[string]time.Time{}
				rcpts = map[string]int{}
			)
			h := newSharedHostRcpt(t, w, 0, 2, 6, func(a string) string {
				if !strings.HasPrefix(a, "user") {
					return "550 5.1.1 no such user" // the accept-all probe
				}
				mu.Lock()
				defer mu.Unlock()
				rcpts[a]++
				f, seen := first[a]
				if !seen {
					first[a] = clock.Now()
				}
				if !seen || clock.Now().Sub(f) < tc.greylist {
					return "450 4.2.0 Greylisted, try again later"
				}
				return "250 2.1.5 OK"
			})
			w.w.Processor = &batch.Processor{Engine: h.engine(t, 0), Sandbox: verify.NewSandbox(nil), MaxGreyAttempts: tc.maxGrey}

			// run verifies emails with a new instance's domain facts and
			// returns the SQS delays of the resends, in order.
			run := func(emails []string) []int32 {
				t.Helper()
				w.w.Grey = w.st.DomainFacts(dynamostore.DomainFactsConfig{})
				b := w.createBatch(evs.ModeFull, emails...)
				items := make([]evs.Item, len(emails))
				for i, e := range emails {
					items[i] = evs.Item{Seq: i, Email: e, Domain: verify.Inspect(e).Address.Domain}
				}
				type due struct {
					at time.Time
					m  batch.Message
				}
				var pending []due
				for _, m := range batch.Pack(b.AccountID, b.ID, items, 200) {
					pending = append(pending, due{clock.Now(), m})
				}
				var delays []int32
				for n := 0; len(pending) > 0; n++ {
					slices.SortStableFunc(pending, func(x, y due) int { return x.at.Compare(y.at) })
					p := pending[0]
					pending = pending[1:]
					clock.Advance(p.at.Sub(clock.Now()))
					body, err := json.Marshal(p.m)
					if err != nil {
						t.Fatal(err)
					}
					w.handle(types.Message{MessageId: aws.String(fmt.Sprintf("%s-%d", b.ID, n)), Body: aws.String(string(body))})
					for _, e := range w.rec.take() {
						delays = append(delays, e.delay)
						pending = append(pending, due{clock.Now().Add(time.Duration(e.delay) * time.Second), e.msg})
					}
				}
				if cur := w.current(); cur.State != evs.StateCompleted || cur.Counters.Deliverable != len(emails) {
					t.Fatalf("batch %s %+v, want %d deliverable\n%s", cur.State, cur.Counters, len(emails), w.logs.String())
				}
				return delays
			}
			// Users 0-2 of each domain in the first batch, 3-5 in the second:
			// greylisting is per address, so each batch's are new.
			var one, two []string
			for _, e := range h.emails {
				if e[len("user")] < '3' {
					one = append(one, e)
				} else {
					two = append(two, e)
				}
			}
			for _, b := range []struct {
				name   string
				emails []string
				delays []int32
				rcpt   int
			}{{"first", one, tc.first, tc.rcptFirst}, {"second", two, tc.second, tc.rcptSecond}} {
				if got := run(b.emails); !slices.Equal(got, b.delays) {
					t.Errorf("%s batch: resend delays %v, want %v", b.name, got, b.delays)
				}
				mu.Lock()
				for _, e := range b.emails {
					if rcpts[e] != b.rcpt {
						t.Errorf("%s batch: %s asked %d times, want %d", b.name, e, rcpts[e], b.rcpt)
					}
				}
				mu.Unlock()
			}
		})
	}
}
