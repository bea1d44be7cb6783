package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/politeness"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// providerPeer is one loopback SMTP server that answers for the MX hosts
// of many Microsoft 365 tenants (tenantN.mail.protection.outlook.com), as
// one provider's fleet would: it records when each session started and
// every RCPT with its time, counts sessions open at once, and can refuse
// chosen sessions at the banner with "421 4.7.0".
type providerPeer struct {
	ln    net.Listener
	port  int
	delay time.Duration
	// refuse tells whether the n-th session (0-based) is refused.
	refuse func(n int) bool
	// reserved, when set, is how many RCPT commands were reserved so
	// far; a RCPT beyond it is counted in uncovered.
	reserved  func() int
	uncovered int

	mu        sync.Mutex
	sessions  []time.Time // start of every session, refused ones included
	refusedAt []time.Time
	rcpts     []rcptAt
	active    int
	maxActive int
	wg        sync.WaitGroup
}

type rcptAt struct {
	addr string
	at   time.Time
}

func startProviderPeer(t *testing.T, delay time.Duration, refuse func(int) bool) *providerPeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &providerPeer{ln: ln, port: ln.Addr().(*net.TCPAddr).Port, delay: delay, refuse: refuse}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *providerPeer) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		n := len(p.sessions)
		p.sessions = append(p.sessions, time.Now())
		p.active++
		p.maxActive = max(p.maxActive, p.active)
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(c, n)
	}
}

func (p *providerPeer) serve(c net.Conn, n int) {
	defer p.wg.Done()
	ended := false
	end := func() {
		if !ended {
			ended = true
			p.mu.Lock()
			p.active--
			p.mu.Unlock()
		}
	}
	defer c.Close()
	defer end()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	say := func(s string) bool {
		time.Sleep(p.delay)
		_, err := io.WriteString(c, s+"\r\n")
		return err == nil
	}
	if p.refuse != nil && p.refuse(n) {
		p.mu.Lock()
		p.refusedAt = append(p.refusedAt, time.Now())
		p.mu.Unlock()
		say("421 4.7.0 Too many connections, try again later")
		return
	}
	if !say("220 tenant.mail.protection.outlook.com ESMTP") {
		return
	}
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		line = strings.TrimRight(line, "\r\n")
		verb := strings.ToUpper(strings.SplitN(line, " ", 2)[0])
		var reply string
		switch {
		case verb == "EHLO" || verb == "HELO":
			reply = "250 tenant.mail.protection.outlook.com Hello"
		case verb == "MAIL", verb == "RSET", verb == "NOOP":
			reply = "250 2.0.0 OK"
		case verb == "RCPT":
			addr := strings.TrimSuffix(strings.TrimPrefix(line[len("RCPT "):], "TO:<"), ">")
			p.mu.Lock()
			p.rcpts = append(p.rcpts, rcptAt{addr: addr, at: time.Now()})
			if p.reserved != nil && len(p.rcpts) > p.reserved() {
				p.uncovered++
			}
			p.mu.Unlock()
			reply = "550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found"
			if strings.HasPrefix(addr, "user") {
				reply = "250 2.1.5 Recipient OK"
			}
		case verb == "QUIT":
			end()
			say("221 2.0.0 Bye")
			return
		default:
			reply = "502 5.5.2 Command not recognized"
		}
		if !say(reply) {
			return
		}
	}
}

func (p *providerPeer) snapshot() (sessions, refused []time.Time, rcpts []rcptAt, maxActive int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.sessions...), append([]time.Time(nil), p.refusedAt...),
		append([]rcptAt(nil), p.rcpts...), p.maxActive
}

// recordingPolite passes politeness calls through to the store and records
// the reservations, pauses and parks.
type recordingPolite struct {
	politeStore

	mu       sync.Mutex
	reserved map[int64]int // window start (ms) → RCPT commands reserved
	pauses   []pauseAt
	parks    int
	// failTakes is how many TakeParked calls fail from now on, as a store
	// fault would; takeFaults counts those that did.
	failTakes, takeFaults int
}

// politeStore is what dynamostore.Store keeps for politeness.
type politeStore interface {
	politeness.State
	batch.Parking
}

type pauseAt struct{ at, now, until time.Time } // now: the clock Pause was given

func (r *recordingPolite) ReserveRcpts(ctx context.Context, key string, least, most, limit int, window time.Duration, now time.Time) (int, time.Time, error) {
	got, next, err := r.politeStore.ReserveRcpts(ctx, key, least, most, limit, window, now)
	if got > 0 {
		r.mu.Lock()
		if r.reserved == nil {
			r.reserved = map[int64]int{}
		}
		r.reserved[now.Truncate(window).UnixMilli()] += got
		r.mu.Unlock()
	}
	return got, next, err
}

func (r *recordingPolite) Pause(ctx context.Context, key string, now time.Time, length func(int) time.Duration) (time.Time, error) {
	until, err := r.politeStore.Pause(ctx, key, now, length)
	if err == nil {
		r.mu.Lock()
		r.pauses = append(r.pauses, pauseAt{at: time.Now(), now: now, until: until})
		r.mu.Unlock()
	}
	return until, err
}

func (r *recordingPolite) TakeParked(ctx context.Context, key string, now time.Time) (string, func(), bool, error) {
	r.mu.Lock()
	fail := r.failTakes > 0
	if fail {
		r.failTakes--
		r.takeFaults++
	}
	r.mu.Unlock()
	if fail {
		return "", nil, false, errors.New("injected: the store is unavailable")
	}
	return r.politeStore.TakeParked(ctx, key, now)
}

func (r *recordingPolite) Park(ctx context.Context, key string, notBefore time.Time, body string) error {
	err := r.politeStore.Park(ctx, key, notBefore, body)
	if err == nil {
		r.mu.Lock()
		r.parks++
		r.mu.Unlock()
	}
	return err
}

// timedSends passes sends through to SQS and records, for every entry of
// SendMessageBatch, when it was sent, its kind and its delay; and counts
// the wake messages.
type timedSends struct {
	app.Client
	mu    sync.Mutex
	sends []timedSend
	wakes atomic.Int64
}

type timedSend struct {
	at    time.Time
	kind  string
	delay int32
}

func (s *timedSends) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	stamp(in)
	out, err := s.Client.SendMessageBatch(ctx, in, optFns...)
	if err == nil {
		s.mu.Lock()
		for _, e := range in.Entries {
			var m batch.Message
			_ = json.Unmarshal([]byte(aws.ToString(e.MessageBody)), &m)
			s.sends = append(s.sends, timedSend{at: time.Now(), kind: m.Kind, delay: e.DelaySeconds})
			if m.Kind == batch.KindWake {
				s.wakes.Add(1)
			}
		}
		s.mu.Unlock()
	}
	return out, err
}

func (s *timedSends) all() []timedSend {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]timedSend(nil), s.sends...)
}

// providerWorld is a live account whose domains t0.example … are each
// hosted by their own Microsoft 365 tenant host, all answered by one peer,
// and several worker invocations with their own engines, on one queue and
// one store.
type providerWorld struct {
	*world
	peer    *providerPeer
	polite  *recordingPolite
	sends   *timedSends
	workers []*batch.Worker
	emails  []string
}

// newProviderWorld: sizes[d] addresses on domain td.example.
func newProviderWorld(t *testing.T, peer *providerPeer, sizes []int, workers, packSize int, window time.Duration, limits politeness.Limits, pauseBase time.Duration) *providerWorld {
	t.Helper()
	w := newWorld(t, packSize, time.Second, 3)
	pw := &providerWorld{world: w, peer: peer, polite: &recordingPolite{politeStore: w.st}}
	dns := testkit.StartDNS(t)
	for d, n := range sizes {
		host := fmt.Sprintf("tenant%d.mail.protection.outlook.com", d)
		if got := verify.ProviderKey(host); got != "microsoft365" {
			t.Fatalf("provider of %s: %q, want microsoft365", host, got)
		}
		dns.AddRecord(host + ". 300 IN A 127.0.0.1")
		dns.AddRecord(fmt.Sprintf("t%d.example. 300 IN MX 10 %s.", d, host))
		for i := range n {
			pw.emails = append(pw.emails, fmt.Sprintf("user%d@t%d.example", i, d))
		}
	}
	res, err := dnscheck.New(dnscheck.Config{Servers: []string{dns.Addr}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	loopback, err := config.ParseEgress("127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	live := evs.Account{ID: "acct-" + uuid.NewString(), Name: testkit.UniqueName(t, "live"), CreatedAt: time.Now().UTC()}
	if err := w.st.CreateAccount(w.ctx, live); err != nil {
		t.Fatal(err)
	}
	w.acct = live
	pw.sends = &timedSends{Client: w.sqs}
	q := app.NewQueue(pw.sends, w.url)
	w.q = q
	for range workers {
		p, err := smtpprobe.New(smtpprobe.Config{HELO: "probe.evs.test", Port: peer.port, Resolver: res, Egress: loopback, PerHostLimit: 4, ReplyTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		eng, err := verify.New(verify.Config{Resolver: res, Prober: verify.SMTP(p)})
		if err != nil {
			t.Fatal(err)
		}
		pw.workers = append(pw.workers, &batch.Worker{
			Queue: q, Store: w.st, Accounts: w.st,
			Processor: &batch.Processor{Engine: eng, Sandbox: verify.NewSandbox(nil)},
			Logger:    slog.New(slog.NewJSONHandler(w.logs, nil)),
			PackSize:  packSize, Concurrency: 4, GreyBackoff: time.Second,
			Polite: &batch.Polite{Parking: pw.polite, Gate: &politeness.Gate{State: pw.polite, MX: eng, Limits: limits,
				Window: window, PauseBase: pauseBase, PauseMax: 4 * pauseBase}},
		})
	}
	return pw
}

// run queues a batch of every address and lets the workers take messages
// until it is final.
func (pw *providerWorld) run(t *testing.T) evs.Batch {
	t.Helper()
	b := pw.createBatch(evs.ModeFull, pw.emails...)
	if err := pw.q.Enqueue(pw.ctx, b); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(pw.ctx, 150*time.Second)
	defer cancel()
	var (
		wg     sync.WaitGroup
		stamps stampSet
	)
	for _, wk := range pw.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				cur, err := pw.st.Batch(ctx, b.AccountID, b.ID)
				if err == nil && cur.State.Final() {
					return
				}
				out, err := pw.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(pw.url), MaxNumberOfMessages: 2, WaitTimeSeconds: 1,
					MessageAttributeNames: []string{sendStamp}})
				if err != nil || len(out.Messages) == 0 {
					continue
				}
				fresh := stamps.fresh(out.Messages)
				if len(fresh) == 0 {
					for _, m := range out.Messages {
						_, _ = pw.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(pw.url), ReceiptHandle: m.ReceiptHandle})
					}
					continue
				}
				resp, err := app.SQSHandler(wk)(ctx, event(fresh...))
				if err != nil || len(resp.BatchItemFailures) > 0 {
					t.Errorf("Handle: %v %+v\n%s", err, resp.BatchItemFailures, pw.logs.String())
					return
				}
				for _, m := range out.Messages {
					_, _ = pw.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(pw.url), ReceiptHandle: m.ReceiptHandle})
				}
			}
		}()
	}
	wg.Wait()
	final := pw.current()
	if final.State != evs.StateCompleted || final.Counters.Deliverable != len(pw.emails) {
		var errs []string // what the workers could not do says why
		for _, l := range strings.Split(pw.logs.String(), "\n") {
			if strings.Contains(l, `"level":"ERROR"`) {
				errs = append(errs, l)
			}
		}
		t.Fatalf("batch %s %+v, want all %d deliverable; worker errors:\n%s", final.State, final.Counters, len(pw.emails), strings.Join(errs, "\n"))
	}
	return final
}

// checkOnce: every address has exactly one result and the peer was asked
// about it exactly once (accept-all probes aside).
func (pw *providerWorld) checkOnce(t *testing.T, b evs.Batch) {
	t.Helper()
	rs, err := pw.st.Results(pw.ctx, b.AccountID, b.ID, -1, 10*len(pw.emails), "")
	if err != nil {
		t.Fatal(err)
	}
	results := map[string]int{}
	for _, r := range rs {
		results[r.Email]++
	}
	_, _, rcpts, _ := pw.peer.snapshot()
	asked := map[string]int{}
	for _, r := range rcpts {
		asked[r.addr]++
	}
	for _, e := range pw.emails {
		if results[e] != 1 || asked[e] != 1 {
			t.Errorf("%s: %d results, asked %d times; want 1 and 1", e, results[e], asked[e])
		}
	}
}

// workSends counts the work messages sent (fresh, unparked and re-queued)
// and those sent with a delay.
func (pw *providerWorld) workSends() (n, delayed int) {
	for _, s := range pw.sends.all() {
		if s.kind == batch.KindWork || s.kind == batch.KindUnparked {
			n++
			if s.delay > 0 {
				delayed++
			}
		}
	}
	return n, delayed
}

// TestPoliteLimitsAcrossWorkers: four worker invocations verify a batch
// whose eleven domains are each hosted by another Microsoft 365 tenant
// host; one peer answers for all of them. Per provider (not per host) at
// most 3 sessions are open at once, and at most 15 RCPT commands are
// reserved per 2 s window, so the RCPTs the peer sees in any 2 s are at
// most two windows' worth (fixed windows). One domain has more addresses
// than a window's budget: it runs in parts. Every address is asked once;
// waiting work is parked, never re-queued with a delay.
//
// Not parallel: its wakes are timed to the RCPT windows, and the other
// tests' load must not move them (see TestWorkerHostLeasesAcrossInvocations).
func TestPoliteLimitsAcrossWorkers(t *testing.T) {
	const (
		sessions = 3
		rcptMax  = 15
		window   = 2 * time.Second
	)
	sizes := []int{20, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3} // 50 addresses
	peer := startProviderPeer(t, 15*time.Millisecond, nil)
	limits := politeness.Limits{Sessions: map[string]int{"microsoft365": sessions}, RcptPerMin: map[string]int{"microsoft365": rcptMax}}
	pw := newProviderWorld(t, peer, sizes, 4, 24, window, limits, time.Minute)
	peer.mu.Lock()
	peer.reserved = func() int {
		pw.polite.mu.Lock()
		defer pw.polite.mu.Unlock()
		n := 0
		for _, r := range pw.polite.reserved {
			n += r
		}
		return n
	}
	peer.mu.Unlock()
	start := time.Now()
	b := pw.run(t)
	elapsed := time.Since(start)
	pw.checkOnce(t, b)

	sessionsAt, _, rcpts, maxActive := peer.snapshot()
	if maxActive > sessions {
		t.Errorf("%d sessions at once for one provider, limit %d", maxActive, sessions)
	}
	// The store never reserved more than the budget in a window.
	pw.polite.mu.Lock()
	reservedTotal := 0
	for at, n := range pw.polite.reserved {
		reservedTotal += n
		if n > rcptMax {
			t.Errorf("window at %d: %d RCPT commands reserved, limit %d", at, n, rcptMax)
		}
	}
	windowsUsed, parks := len(pw.polite.reserved), pw.polite.parks
	pw.polite.mu.Unlock()
	// Nothing is sent without a reservation ...
	if len(rcpts) > reservedTotal {
		t.Errorf("the peer saw %d RCPT commands, only %d were reserved", len(rcpts), reservedTotal)
	}
	// ... nor before its reservation: the peer never saw more RCPT
	// commands than were reserved by then ...
	peer.mu.Lock()
	uncovered := peer.uncovered
	peer.mu.Unlock()
	if uncovered != 0 {
		t.Errorf("%d RCPT commands reached the peer beyond what was reserved when they came", uncovered)
	}
	// ... and the most the peer saw within a window, for the log.
	sort.Slice(rcpts, func(i, j int) bool { return rcpts[i].at.Before(rcpts[j].at) })
	most := 0
	for i := range rcpts {
		n := 0
		for j := i; j < len(rcpts) && rcpts[j].at.Sub(rcpts[i].at) < window; j++ {
			n++
		}
		most = max(most, n)
	}
	// The budget bit: 50 addresses and their probes need at least four
	// windows of 15 (without a limit the peer is done in well under one).
	if minWindows := (len(rcpts) + rcptMax - 1) / rcptMax; windowsUsed < minWindows || len(rcpts) < len(pw.emails) {
		t.Errorf("%d RCPT commands reserved over %d windows; want at least %d windows", len(rcpts), windowsUsed, minWindows)
	}
	// Waiting work waited in the store: no work message went out with a
	// delay, and every message beyond the planned ones released a park.
	sent, delayed := pw.workSends()
	planned := len(batch.Pack(b.AccountID, b.ID, itemsOf(pw.emails), 24))
	if delayed > 0 {
		t.Errorf("%d work messages re-queued with a delay (a busy loop)", delayed)
	}
	if parks == 0 {
		t.Errorf("nothing was parked: the limits did not bite")
	}
	if sent > planned+parks {
		t.Errorf("%d work messages sent; %d planned and %d parks can explain at most %d", sent, planned, parks, planned+parks)
	}
	t.Logf("%d addresses in %s: %d sessions, at most %d at once; %d RCPTs over %d windows, at most %d within %s; %d parks, %d work messages (%d planned), %d wakes",
		len(pw.emails), elapsed.Round(time.Millisecond), len(sessionsAt), maxActive, len(rcpts), windowsUsed, most, window, parks, sent, planned, pw.sends.wakes.Load())
}

// TestPoliteReleaseFaultRetried: with one session at once, every group
// but the first waits for the slot, parked; each session end starts the
// next. The store fails the first releases (TakeParked), as a transient
// fault would: a wake soon after retries them, so the batch finishes in
// seconds, not when the slot leases lapse (minutes) or the sweep comes.
// It can run beside the other tests: its bound is the run's 150 s, far
// past the seconds a retried release takes.
func TestPoliteReleaseFaultRetried(t *testing.T) {
	t.Parallel()
	sizes := []int{2, 2, 2, 2, 2, 2}
	peer := startProviderPeer(t, 5*time.Millisecond, nil)
	limits := politeness.Limits{Sessions: map[string]int{"*": 1}, RcptPerMin: map[string]int{"*": 10000}}
	pw := newProviderWorld(t, peer, sizes, 4, 2, time.Minute, limits, time.Minute)
	pw.polite.mu.Lock()
	pw.polite.failTakes = 3
	pw.polite.mu.Unlock()
	b := pw.run(t)
	pw.checkOnce(t, b)
	pw.polite.mu.Lock()
	faults, parks := pw.polite.takeFaults, pw.polite.parks
	pw.polite.mu.Unlock()
	if faults == 0 || parks == 0 {
		t.Errorf("%d releases failed, %d parks: the fault did not bite", faults, parks)
	}
	if _, _, _, maxActive := peer.snapshot(); maxActive > 1 {
		t.Errorf("%d sessions at once, limit 1", maxActive)
	}
}

// itemsOf turns addresses into the items the batch stores.
func itemsOf(emails []string) []evs.Item {
	items := make([]evs.Item, len(emails))
	for i, e := range emails {
		items[i] = evs.Item{Seq: i, Email: e, Domain: e[strings.IndexByte(e, '@')+1:]}
	}
	return items
}

// TestPolitePauseAfter421: the peer refuses one session with "421 4.7.0"
// at its banner. The provider is then paused for every worker: no session
// to any of its hosts starts, and no work message is sent, until the pause
// ends; the refused group's addresses were not asked, so they wait too
// and are asked once afterwards.
//
// Not parallel, as TestPoliteLimitsAcrossWorkers.
func TestPolitePauseAfter421(t *testing.T) {
	const pause = 4 * time.Second
	sizes := []int{3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3} // 36 addresses
	peer := startProviderPeer(t, 15*time.Millisecond, func(n int) bool { return n == 2 })
	limits := politeness.Limits{Sessions: map[string]int{"*": 3}, RcptPerMin: map[string]int{"*": 10000}}
	pw := newProviderWorld(t, peer, sizes, 4, 6, time.Minute, limits, pause)
	b := pw.run(t)
	pw.checkOnce(t, b)

	sessionsAt, refused, _, _ := peer.snapshot()
	pw.polite.mu.Lock()
	pauses := append([]pauseAt(nil), pw.polite.pauses...)
	pw.polite.mu.Unlock()
	if len(refused) != 1 || len(pauses) == 0 {
		t.Fatalf("%d sessions refused, %d pauses recorded; want 1 and at least 1", len(refused), len(pauses))
	}
	p := pauses[0]
	// The pause is taken after the 421, and lasts the first pause's
	// length from the worker's clock.
	if d := p.until.Sub(p.now); p.now.Before(refused[0]) || d != pause {
		t.Errorf("paused at %s for %s, the 421 at %s; want a pause of %s after it", p.now, d, refused[0], pause)
	}
	// A session admitted just before the pause was written may still
	// connect: a grace of a second after it, then none until its end.
	quiet := p.at.Add(time.Second)
	var during, after int
	for _, s := range sessionsAt {
		switch {
		case s.After(quiet) && s.Before(p.until):
			during++
		case !s.Before(p.until):
			after++
		}
	}
	if during > 0 {
		t.Errorf("%d sessions started during the pause (%s to %s)", during, quiet.Format(time.StampMilli), p.until.Format(time.StampMilli))
	}
	if after == 0 {
		t.Errorf("no session after the pause: the test cannot tell")
	}
	// Parked, not circling: no work message during the pause.
	for _, s := range pw.sends.all() {
		if (s.kind == batch.KindWork || s.kind == batch.KindUnparked) && s.at.After(quiet) && s.at.Before(p.until) {
			t.Errorf("a %s message was sent during the pause, at %s", s.kind, s.at.Format(time.StampMilli))
		}
	}
	if _, delayed := pw.workSends(); delayed > 0 {
		t.Errorf("%d work messages re-queued with a delay", delayed)
	}
	t.Logf("%d sessions (%d after the pause), 421 at %s, paused until %s, %d wakes",
		len(sessionsAt), after, refused[0].Format(time.StampMilli), p.until.Format(time.StampMilli), pw.sends.wakes.Load())
}
