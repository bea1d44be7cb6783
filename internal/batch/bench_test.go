package batch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/sqlitestore"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// farm is 50 loopback MTAs (127.0.1.1–50, one port) that answer every
// command after a delay, and a DNS server for 500 domains spread over them.
type farm struct {
	servers []*testkit.SMTPServer
	engine  *verify.Engine
}

func newFarm(tb testing.TB, hosts, domains int, delay time.Duration) *farm {
	tb.Helper()
	f := &farm{}
	port := 0
	for i := 0; i < hosts; i++ {
		s := testkit.StartSMTP(tb, testkit.SMTPOptions{IP: fmt.Sprintf("127.0.1.%d", i+1), Port: port, Delay: delay, Rcpt: func(a string) string {
			if len(a) > 3 && a[:3] == "zz-" {
				return "550 5.1.1 no such user"
			}
			return "250 2.1.5 OK"
		}})
		port = s.Port
		f.servers = append(f.servers, s)
	}
	dns := testkit.StartDNS(tb)
	for i := 0; i < hosts; i++ {
		dns.AddRecord(fmt.Sprintf("mx%d.farm.example. 3600 IN A 127.0.1.%d", i, i+1))
	}
	for d := 0; d < domains; d++ {
		dns.AddRecord(fmt.Sprintf("d%d.example. 3600 IN MX 10 mx%d.farm.example.", d, d%hosts))
	}
	res, err := dnscheck.New(dnscheck.Config{Servers: []string{dns.Addr}, Timeout: 2 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	loopback, err := config.ParseEgress("127.0.0.0/8") // the farm's MTAs
	if err != nil {
		tb.Fatal(err)
	}
	p, err := smtpprobe.New(smtpprobe.Config{HELO: "probe.evs.test", Port: port, Resolver: res, Egress: loopback, PerHostLimit: 4, ReplyTimeout: 10 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	f.engine, err = verify.New(verify.Config{Resolver: res, Prober: verify.SMTP(p), RandomLocal: func() string { return "zz-random" }})
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

func (f *farm) connections() int {
	n := 0
	for _, s := range f.servers {
		n += s.Connections()
	}
	return n
}

// runBatch stores a batch, runs it with a Runner and waits for completion.
func runBatch(tb testing.TB, st *sqlitestore.Store, engine batch.Verifier, test bool, emails []string, mode evs.Mode, w batch.Worker, rc batch.LocalConfig) time.Duration {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	acct := evs.Account{ID: fmt.Sprintf("a-%d", time.Now().UnixNano()), Name: fmt.Sprintf("n-%d", time.Now().UnixNano()), Test: test, CreatedAt: time.Now()}
	if err := st.CreateAccount(ctx, acct); err != nil {
		tb.Fatal(err)
	}
	r, err := batch.NewLocalQueue(st, localWorker(w, st, engine), rc)
	if err != nil {
		tb.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	items := make([]evs.Item, len(emails))
	for i, e := range emails {
		in := verify.Inspect(e)
		items[i] = evs.Item{Seq: i, Email: e, Domain: in.Address.Domain}
	}
	now := time.Now()
	b := evs.Batch{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", now.UnixNano()%1e12), AccountID: acct.ID, Mode: mode, State: evs.StateQueued,
		CreatedAt: now, ExpiresAt: now.Add(time.Hour), Counters: evs.Counters{Total: len(emails)}}
	start := time.Now()
	if err := st.CreateBatch(ctx, b, items); err != nil {
		tb.Fatal(err)
	}
	if err := r.Enqueue(ctx, b); err != nil {
		tb.Fatal(err)
	}
	testkit.EventuallyEvery(tb, time.Hour, 5*time.Millisecond, func() error {
		got, err := st.Batch(ctx, acct.ID, b.ID)
		if err != nil {
			tb.Fatal(err)
		}
		if got.State == evs.StateCompleted {
			if got.Counters.Processed != len(emails) {
				tb.Fatalf("processed %d of %d", got.Counters.Processed, len(emails))
			}
			return nil
		}
		if got.State.Final() {
			tb.Fatalf("batch ended %s", got.State)
		}
		return fmt.Errorf("batch %s: %+v", got.State, got.Counters)
	})
	elapsed := time.Since(start)
	cancel()
	r.Wait()
	return elapsed
}

// BenchmarkSandbox50k: 50,000 test-mode addresses from create to
// completed (goal: under 5 s).
func BenchmarkSandbox50k(b *testing.B) {
	emails := make([]string, 50000)
	for i := range emails {
		emails[i] = fmt.Sprintf("user%d@d%d.example", i, i%2000)
	}
	for b.Loop() {
		st, err := sqlitestore.Open(context.Background(), b.TempDir(), time.Now)
		if err != nil {
			b.Fatal(err)
		}
		d := runBatch(b, st, verify.NewSandbox(nil), true, emails, evs.ModeFull, batch.Worker{}, batch.LocalConfig{})
		b.ReportMetric(d.Seconds(), "s/50k-batch")
		b.ReportMetric(float64(len(emails))/d.Seconds(), "addr/s")
		st.Close()
	}
}

// BenchmarkFullMode10k: 10,000 addresses over 500 domains on 50 loopback
// MTAs that answer each command after 20 ms, in full mode (goals: ≥ 200
// addresses/s and ≥ 3 addresses per SMTP connection).
func BenchmarkFullMode10k(b *testing.B) {
	f := newFarm(b, 50, 500, 20*time.Millisecond)
	emails := make([]string, 10000)
	for i := range emails {
		emails[i] = fmt.Sprintf("user%d@d%d.example", i, i%500)
	}
	for b.Loop() {
		st, err := sqlitestore.Open(context.Background(), b.TempDir(), time.Now)
		if err != nil {
			b.Fatal(err)
		}
		before := f.connections()
		d := runBatch(b, st, f.engine, false, emails, evs.ModeFull, batch.Worker{}, batch.LocalConfig{PerBatch: 128, Workers: 256})
		conns := f.connections() - before
		b.ReportMetric(float64(len(emails))/d.Seconds(), "addr/s")
		b.ReportMetric(float64(len(emails))/float64(conns), "addr/conn")
		b.ReportMetric(float64(conns), "conns")
		st.Close()
	}
}
