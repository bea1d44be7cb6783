package batch_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/politeness"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// The worker's compute cost, measured (docs/aws.md, "Cost of 1,000,000
// addresses"): the real Worker, behind the worker Lambda's own SQS handler,
// runs a full-mode batch with the doc's mix against loopback MTAs that wait
// before every reply, and the benchmark adds up the wall time of every
// invocation, as Lambda bills it. Invocations are simulated as the SQS
// trigger makes them: events of up to its BatchSize (template.yaml) ready
// messages, up to 20
// invocations at once (WorkerMaxConcurrency's default), each with the
// function's timeout; politeness is the AWS worker's (parking, wakes), its
// state in memory instead of DynamoDB.
//
// Time is scaled: the reply delay, the session limit, the function's
// timeout and reserve, the politeness window and the retry back-off are
// all multiplied by
// scale, and billed seconds are divided by it. The cost is linear in the
// time spent waiting for replies; BenchmarkWorkerCostScale checks that
// against a real-scale run.

// costMix is the doc's list: bigGroups groups of 200 addresses at one
// domain on a large provider, and smallDomains domains of 3 addresses each
// on their own providers.
type costMix struct {
	bigGroups, smallDomains int
}

func (m costMix) size() int { return m.bigGroups*200 + m.smallDomains*3 }

// costWorld is the loopback MTAs of a mix and the engine that probes them.
type costWorld struct {
	engine  *verify.Engine
	servers []*testkit.SMTPServer
}

func newCostWorld(tb testing.TB, m costMix, delay time.Duration) *costWorld {
	tb.Helper()
	w := &costWorld{}
	rcpt := func(a string) string {
		if len(a) > 3 && a[:3] == "zz-" {
			return "550 5.1.1 no such user"
		}
		return "250 2.1.5 OK"
	}
	// The large provider on 127.0.2.1, the small domains' MTAs on 20
	// addresses of 127.0.1.0/24, all on one port.
	big := testkit.StartSMTP(tb, testkit.SMTPOptions{IP: "127.0.2.1", Delay: delay, Rcpt: rcpt})
	w.servers = append(w.servers, big)
	const smallHosts = 20
	for i := range smallHosts {
		w.servers = append(w.servers, testkit.StartSMTP(tb, testkit.SMTPOptions{IP: fmt.Sprintf("127.0.1.%d", i+1), Port: big.Port, Delay: delay, Rcpt: rcpt}))
	}
	dns := testkit.StartDNS(tb)
	dns.AddRecord("big.example. 3600 IN MX 5 gmail-smtp-in.l.google.com.")
	dns.AddRecord("gmail-smtp-in.l.google.com. 3600 IN A 127.0.2.1")
	for d := range m.smallDomains {
		dns.AddRecord(fmt.Sprintf("s%d.example. 3600 IN MX 10 mx.s%d.example.", d, d))
		dns.AddRecord(fmt.Sprintf("mx.s%d.example. 3600 IN A 127.0.1.%d", d, d%smallHosts+1))
	}
	res, err := dnscheck.New(dnscheck.Config{Servers: []string{dns.Addr}, Timeout: 5 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	loopback, err := config.ParseEgress("127.0.0.0/8")
	if err != nil {
		tb.Fatal(err)
	}
	// Each Lambda instance has a prober of its own: no limit per host
	// across the simulated invocations (politeness still limits them).
	p, err := smtpprobe.New(smtpprobe.Config{HELO: "probe.evs.test", Port: big.Port, Resolver: res, Egress: loopback, PerHostLimit: 1000, ReplyTimeout: 30 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	w.engine, err = verify.New(verify.Config{Resolver: res, Prober: verify.SMTP(p), RandomLocal: func() string { return "zz-random" }})
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

func (w *costWorld) connections() int {
	n := 0
	for _, s := range w.servers {
		n += s.Connections()
	}
	return n
}

// costResult is what one batch run cost.
type costResult struct {
	billed      time.Duration // sum of invocation wall times, unscaled
	invocations int
	sessions    int
	wall        time.Duration
}

// costTuning is what a run changes in the worker beside the time scale.
type costTuning struct {
	name string
	tune func(w *batch.Worker)
	// perInvocation is the most messages an invocation gets (default:
	// the worker trigger's BatchSize in template.yaml): 2 models a queue
	// the batching window seldom packs.
	perInvocation int
}

// runCost runs one batch of mix m through the AWS worker path and returns
// what it cost, scaled back to real time.
func runCost(tb testing.TB, world *costWorld, m costMix, scale float64, tuning costTuning) costResult {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	st, err := sqlitestore.Open(ctx, tb.TempDir(), time.Now)
	if err != nil {
		tb.Fatal(err)
	}
	defer st.Close()
	sc := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	q := &memQueue{}
	w := &batch.Worker{
		Queue: q, Store: st, Accounts: st,
		Processor: &batch.Processor{Engine: world.engine, Sandbox: verify.NewSandbox(nil), SessionLimit: sc(time.Minute)},
		Logger:    slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Reserve:   sc(90 * time.Second),
		// A session that runs past its limit sends the rest of its group
		// to the next attempt, after the back-off, scaled like the rest.
		GreyBackoff: sc(5 * time.Minute),
		Polite: &batch.Polite{Parking: newMemParking(), Gate: &politeness.Gate{
			State: politeness.NewMemoryState(nil), MX: world.engine, Egress: "bench",
			Window: sc(time.Minute), SlotTTL: sc(6 * time.Minute),
		}},
	}
	if tuning.tune != nil {
		tuning.tune(w)
	}
	acct := evs.Account{ID: fmt.Sprintf("a-%d", time.Now().UnixNano()), Name: fmt.Sprintf("n-%d", time.Now().UnixNano()), CreatedAt: time.Now()}
	if err := st.CreateAccount(ctx, acct); err != nil {
		tb.Fatal(err)
	}
	// The list in the order a customer sends it: the large provider's
	// addresses spread through it.
	var items []evs.Item
	big, small := 0, 0
	for len(items) < m.size() {
		var e, d string
		if big < m.bigGroups*200 && (small >= m.smallDomains*3 || len(items)%5 < 2) {
			e, d = fmt.Sprintf("user%d@big.example", big), "big.example"
			big++
		} else {
			d = fmt.Sprintf("s%d.example", small/3)
			e = fmt.Sprintf("user%d@%s", small, d)
			small++
		}
		items = append(items, evs.Item{Seq: len(items), Email: e, Domain: d})
	}
	now := time.Now()
	b := evs.Batch{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", now.UnixNano()%1e12), AccountID: acct.ID, Mode: evs.ModeFull, State: evs.StateQueued,
		CreatedAt: now, ExpiresAt: now.Add(time.Hour), Counters: evs.Counters{Total: len(items)}}
	if err := st.CreateBatch(ctx, b, items); err != nil {
		tb.Fatal(err)
	}
	before := world.connections()
	start := time.Now()
	if err := q.Send(ctx, []batch.Message{batch.PlanMessage(b)}, 0); err != nil {
		tb.Fatal(err)
	}
	handler := app.SQSHandler(w)
	perInvocation := workerBatchSize(tb)
	var billed atomic.Int64
	var invocations atomic.Int32
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 20 { // WorkerMaxConcurrency's default
		wg.Add(1)
		go func() {
			defer wg.Done()
			// An empty queue is asked again at the next tick, as SQS
			// is polled.
			poll := time.NewTicker(2 * time.Millisecond)
			defer poll.Stop()
			for runCtx.Err() == nil {
				recs := q.take(cmp.Or(tuning.perInvocation, perInvocation))
				if len(recs) == 0 {
					select {
					case <-poll.C:
					case <-runCtx.Done():
					}
					continue
				}
				ev := events.SQSEvent{}
				for _, r := range recs {
					body, err := json.Marshal(r.m)
					if err != nil {
						panic(err)
					}
					ev.Records = append(ev.Records, events.SQSMessage{MessageId: strconv.Itoa(r.id), Body: string(body),
						Attributes: map[string]string{"ApproximateReceiveCount": strconv.Itoa(r.received)}})
				}
				ictx, done := context.WithTimeout(runCtx, sc(300*time.Second))
				t0 := time.Now()
				resp, _ := handler(ictx, ev)
				billed.Add(int64(time.Since(t0)))
				done()
				invocations.Add(1)
				// A failed message comes back after the visibility timeout.
				for _, f := range resp.BatchItemFailures {
					for _, r := range recs {
						if strconv.Itoa(r.id) == f.ItemIdentifier {
							q.again(r, sc(30*time.Second))
						}
					}
				}
			}
		}()
	}
	last, lastAt := -1, time.Now()
	testkit.Eventually(tb, 24*time.Hour, func() error {
		got, err := st.Batch(ctx, acct.ID, b.ID)
		if err != nil {
			tb.Fatal(err)
		}
		if got.Counters.Processed != last {
			last, lastAt = got.Counters.Processed, time.Now()
		}
		if stall := sc(10 * time.Minute); time.Since(lastAt) > stall {
			// No result for longer than any wait of the worker's: work
			// was lost.
			tb.Fatalf("no progress for %s: %+v; queued %s; parked %s", stall, got.Counters, q, w.Polite.Parking)
		}
		if got.State == evs.StateCompleted {
			if got.Counters.Processed != len(items) || got.Counters.Deliverable != len(items) {
				tb.Fatalf("counters %+v of %d addresses", got.Counters, len(items))
			}
			return nil
		}
		if got.State.Final() || ctx.Err() != nil {
			tb.Fatalf("batch %s after %s: %+v", got.State, time.Since(start), got.Counters)
		}
		return fmt.Errorf("batch %s: %+v", got.State, got.Counters)
	})
	wall := time.Since(start)
	stop()
	wg.Wait()
	return costResult{
		billed:      time.Duration(float64(billed.Load()) / scale),
		invocations: int(invocations.Load()),
		sessions:    world.connections() - before,
		wall:        wall,
	}
}

// Prices of docs/aws.md: Lambda arm64 per GB-second and per request, at
// the worker's 512 MB.
const (
	lambdaGBs       = 0.0000133334
	lambdaPerCall   = 0.20 / 1e6
	workerMemoryGiB = 0.5
)

func reportCost(b *testing.B, r costResult, n int) {
	perK := r.billed.Seconds() * 1000 / float64(n)
	b.ReportMetric(perK, "billed-s/1k-addr")
	b.ReportMetric(perK*1000*workerMemoryGiB*lambdaGBs+float64(r.invocations)*1e6/float64(n)*lambdaPerCall, "$compute/1M")
	b.ReportMetric(float64(r.invocations)*1000/float64(n), "invocations/1k")
	b.ReportMetric(float64(r.sessions)*1000/float64(n), "sessions/1k")
	b.ReportMetric(r.wall.Seconds(), "wall-s")
}

// BenchmarkWorkerCost: billed seconds per 1,000 addresses, and the
// compute's dollars per 1,000,000, at 0.2, 0.5 and 1 s per reply, time
// scaled by 1/10 (replies of 20, 50 and 100 ms). The list is 2,000
// addresses: 40% in 4 groups of 200 at one domain of a large provider,
// 60% on 400 domains of 3.
func BenchmarkWorkerCost(b *testing.B) {
	m := costMix{bigGroups: 4, smallDomains: 400}
	const scale = 0.1
	for _, reply := range []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second} {
		for _, tuning := range costTunings {
			b.Run(fmt.Sprintf("reply=%s/%s", reply, tuning.name), func(b *testing.B) {
				world := newCostWorld(b, m, time.Duration(float64(reply)*scale))
				for b.Loop() {
					reportCost(b, runCost(b, world, m, scale, tuning), m.size())
				}
			})
		}
	}
}

// BenchmarkWorkerCostScale: the same 1,000-address list (2 groups of 200
// at the large provider, 200 domains of 3) at 0.2 s per reply, once in
// real time and once scaled by 1/10, side by side: their billed seconds
// per 1,000 addresses should agree if scaling time down is sound.
func BenchmarkWorkerCostScale(b *testing.B) {
	m := costMix{bigGroups: 2, smallDomains: 200}
	const reply = 200 * time.Millisecond
	for _, scale := range []float64{1, 0.1} {
		b.Run(fmt.Sprintf("scale=%g", scale), func(b *testing.B) {
			world := newCostWorld(b, m, time.Duration(float64(reply)*scale))
			for b.Loop() {
				reportCost(b, runCost(b, world, m, scale, costTunings[1]), m.size())
			}
		})
	}
}

// costTunings are the worker settings compared side by side: a group's
// sessions one after another (before), and two at once, as the worker
// function runs them (functions/worker).
var costTunings = []costTuning{
	{name: "sessions=1", tune: func(w *batch.Worker) { w.Processor.GroupSessions = 1 }},
	{name: "sessions=2", tune: func(w *batch.Worker) { w.Processor.GroupSessions = 2 }},
	{name: "sessions=2,messages=2", tune: func(w *batch.Worker) { w.Processor.GroupSessions = 2 }, perInvocation: 2},
}

// memQueue is SQS in memory: messages delivered once their delay passed,
// oldest first, each taken by one invocation.
type memQueue struct {
	mu    sync.Mutex
	next  int
	ready []queued
}

type queued struct {
	m        batch.Message
	at       time.Time
	id       int
	received int
}

func (q *memQueue) Send(_ context.Context, ms []batch.Message, delay time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	at := time.Now().Add(delay)
	for _, m := range ms {
		q.next++
		q.ready = append(q.ready, queued{m: m, at: at, id: q.next})
	}
	return nil
}

// memQueue delays, and redelivers, as SQS does.
func (q *memQueue) MaxDelay() time.Duration  { return batch.MaxDelay }
func (q *memQueue) DelayUnit() time.Duration { return time.Second }
func (q *memQueue) Redelivers() bool         { return true }
func (q *memQueue) SharedSlots() bool        { return false }

func (q *memQueue) String() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := fmt.Sprintf("%d:", len(q.ready))
	for _, r := range q.ready {
		out += fmt.Sprintf(" %s(%d items, key %q, in %s)", r.m.Kind, len(r.m.Items), r.m.Key, time.Until(r.at).Round(time.Millisecond))
	}
	return out
}

// again puts a message that failed back, visible after d.
func (q *memQueue) again(r queued, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	r.at = time.Now().Add(d)
	q.ready = append(q.ready, r)
}

// take hands out up to n messages whose delay has passed.
func (q *memQueue) take(n int) []queued {
	q.mu.Lock()
	defer q.mu.Unlock()
	sort.SliceStable(q.ready, func(i, j int) bool { return q.ready[i].at.Before(q.ready[j].at) })
	now := time.Now()
	var out []queued
	for len(out) < n && len(q.ready) > 0 && !q.ready[0].at.After(now) {
		r := q.ready[0]
		r.received++
		out = append(out, r)
		q.ready = q.ready[1:]
	}
	return out
}

// memParking is batch.Parking in memory, as dynamostore keeps it.
type memParking struct {
	mu     sync.Mutex
	next   int
	parked map[string][]parked
	wakes  map[string]time.Time
}

type parked struct {
	id        int
	notBefore time.Time
	body      string
	takenTill time.Time
}

func newMemParking() *memParking {
	return &memParking{parked: map[string][]parked{}, wakes: map[string]time.Time{}}
}

func (p *memParking) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := ""
	for k, es := range p.parked {
		out += fmt.Sprintf(" %s: %d entries", k, len(es))
		for _, e := range es {
			out += fmt.Sprintf(" (due in %s, taken for %s)", time.Until(e.notBefore).Round(time.Millisecond), time.Until(e.takenTill).Round(time.Millisecond))
		}
		out += fmt.Sprintf("; wake in %s", time.Until(p.wakes[k]).Round(time.Millisecond))
	}
	return out
}

func (p *memParking) Park(_ context.Context, key string, notBefore time.Time, body string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	p.parked[key] = append(p.parked[key], parked{id: p.next, notBefore: notBefore, body: body})
	sort.SliceStable(p.parked[key], func(i, j int) bool { return p.parked[key][i].notBefore.Before(p.parked[key][j].notBefore) })
	return nil
}

func (p *memParking) TakeParked(_ context.Context, key string, now time.Time) (string, func(), bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, e := range p.parked[key] {
		if e.notBefore.After(now) {
			break
		}
		if e.takenTill.After(now) {
			continue
		}
		p.parked[key][i].takenTill = now.Add(2 * time.Minute)
		id := e.id
		return e.body, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			es := p.parked[key]
			for j := range es {
				if es[j].id == id {
					p.parked[key] = append(es[:j:j], es[j+1:]...)
					return
				}
			}
		}, true, nil
	}
	return "", nil, false, nil
}

func (p *memParking) NextParked(_ context.Context, key string) (time.Time, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if es := p.parked[key]; len(es) > 0 {
		return es[0].notBefore, true, nil
	}
	return time.Time{}, false, nil
}

func (p *memParking) ClaimWake(_ context.Context, key string, at, now time.Time) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w, ok := p.wakes[key]; ok && w.After(now) && !w.After(at) {
		return false, nil
	}
	p.wakes[key] = at
	return true, nil
}

func (p *memParking) ParkedKeys(context.Context) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var keys []string
	for k, es := range p.parked {
		if len(es) > 0 {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// workerBatchSize is the worker function's SQS BatchSize in template.yaml:
// the invocations the benchmark simulates are packed as the trigger packs
// them.
func workerBatchSize(tb testing.TB) int {
	tb.Helper()
	tpl, err := testkit.LoadSAMTemplate("../../template.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range tpl.Functions {
		if f.ID == "WorkerFunction" && f.SQSBatchSize > 0 {
			return f.SQSBatchSize
		}
	}
	tb.Fatal("template.yaml: the WorkerFunction has no SQS event with a BatchSize")
	return 0
}
