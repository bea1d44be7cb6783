package dnscheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
	"github.com/miekg/dns"
)

// clock is a settable time source for cache expiry.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newResolver(t testing.TB, cfg Config) *Resolver {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Attempts == 0 {
		cfg.Attempts = 1
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

// deadServer returns a loopback UDP address nobody listens on, so queries
// to it fail with a network error.
func deadServer(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

func TestLookupMail(t *testing.T) {
	srv := testkit.StartDNS(t)
	for _, rr := range []string{
		"corp.example. 300 IN MX 20 mx2.corp.example.",
		"corp.example. 300 IN MX 10 MX1.Corp.Example.",
		"tie.example. 300 IN MX 10 b.tie.example.",
		"tie.example. 300 IN MX 10 a.tie.example.",
		"tie.example. 300 IN MX 30 a.tie.example.",
		"null.example. 300 IN MX 0 .",
		"mixed.example. 300 IN MX 0 .",
		"mixed.example. 300 IN MX 10 mx.mixed.example.",
		"alias.example. 300 IN CNAME corp.example.",
		"dangling.example. 300 IN CNAME gone.example.",
		"aonly.example. 300 IN A 192.0.2.10",
		"v6only.example. 300 IN AAAA 2001:db8::10",
		"txtonly.example. 300 IN TXT \"v=spf1 -all\"",
		"afail.example. 300 IN TXT \"x\"",
		"halffail.example. 300 IN AAAA 2001:db8::11",
		"halfnodata.example. 300 IN TXT \"x\"",
		"tc.example. 300 IN MX 5 mx.tc.example.",
	} {
		srv.AddRecord(rr)
	}
	// A real answer too large for 1232 bytes: the server sets TC itself.
	var bigMX []MX
	for i := range 40 {
		host := fmt.Sprintf("mail-exchanger-number-%02d.a-rather-long-name.big.example", i)
		srv.AddRecord(fmt.Sprintf("big.example. 300 IN MX %d %s.", i, host))
		bigMX = append(bigMX, MX{Host: host, Pref: uint16(i)})
	}
	srv.SetRcode("broken.example.", dns.RcodeServerFailure)
	srv.SetRcode("refused.example.", dns.RcodeRefused)
	srv.SetRcode("notimp.example.", dns.RcodeNotImplemented)
	srv.SetRcodeFor("afail.example.", dns.TypeA, dns.RcodeServerFailure)
	srv.SetRcodeFor("afail.example.", dns.TypeAAAA, dns.RcodeServerFailure)
	srv.SetRcodeFor("halffail.example.", dns.TypeA, dns.RcodeServerFailure)
	srv.SetRcodeFor("halfnodata.example.", dns.TypeA, dns.RcodeServerFailure)
	srv.Truncate("tc.example.", true)

	tests := []struct {
		domain string
		want   MailResult
	}{
		{"corp.example", MailResult{Domain: "corp.example", Outcome: OutcomeOK, Rcode: "NOERROR",
			MX: []MX{{"mx1.corp.example", 10}, {"mx2.corp.example", 20}}}},
		{"CORP.Example.", MailResult{Domain: "corp.example", Outcome: OutcomeOK, Rcode: "NOERROR",
			MX: []MX{{"mx1.corp.example", 10}, {"mx2.corp.example", 20}}}},
		{"tie.example", MailResult{Domain: "tie.example", Outcome: OutcomeOK, Rcode: "NOERROR",
			MX: []MX{{"a.tie.example", 10}, {"b.tie.example", 10}}}},
		{"missing.example", MailResult{Domain: "missing.example", Outcome: OutcomeNXDomain, Rcode: "NXDOMAIN"}},
		{"null.example", MailResult{Domain: "null.example", Outcome: OutcomeNullMX, Rcode: "NOERROR"}},
		{"mixed.example", MailResult{Domain: "mixed.example", Outcome: OutcomeOK, Rcode: "NOERROR",
			MX: []MX{{"mx.mixed.example", 10}}}},
		{"alias.example", MailResult{Domain: "alias.example", Outcome: OutcomeOK, Rcode: "NOERROR",
			MX: []MX{{"mx1.corp.example", 10}, {"mx2.corp.example", 20}}}},
		{"dangling.example", MailResult{Domain: "dangling.example", Outcome: OutcomeNXDomain, Rcode: "NXDOMAIN"}},
		{"aonly.example", MailResult{Domain: "aonly.example", Outcome: OutcomeOK, Rcode: "NOERROR",
			Implicit: true, MX: []MX{{"aonly.example", 0}}}},
		{"v6only.example", MailResult{Domain: "v6only.example", Outcome: OutcomeOK, Rcode: "NOERROR",
			Implicit: true, MX: []MX{{"v6only.example", 0}}}},
		{"txtonly.example", MailResult{Domain: "txtonly.example", Outcome: OutcomeNoRecords, Rcode: "NOERROR"}},
		// Failing address lookups must not turn into no_records.
		{"afail.example", MailResult{Domain: "afail.example", Outcome: OutcomeError, Rcode: "SERVFAIL", Err: "servfail"}},
		{"halfnodata.example", MailResult{Domain: "halfnodata.example", Outcome: OutcomeError, Rcode: "SERVFAIL", Err: "servfail"}},
		// One family answering is enough.
		{"halffail.example", MailResult{Domain: "halffail.example", Outcome: OutcomeOK, Rcode: "NOERROR",
			Implicit: true, MX: []MX{{"halffail.example", 0}}}},
		{"broken.example", MailResult{Domain: "broken.example", Outcome: OutcomeError, Rcode: "SERVFAIL", Err: "servfail"}},
		{"refused.example", MailResult{Domain: "refused.example", Outcome: OutcomeError, Rcode: "REFUSED", Err: "refused"}},
		{"notimp.example", MailResult{Domain: "notimp.example", Outcome: OutcomeError, Rcode: "NOTIMP", Err: "servfail"}},
		{"tc.example", MailResult{Domain: "tc.example", Outcome: OutcomeOK, Rcode: "NOERROR",
			MX: []MX{{"mx.tc.example", 5}}}},
		{"big.example", MailResult{Domain: "big.example", Outcome: OutcomeOK, Rcode: "NOERROR", MX: bigMX}},
		{"", MailResult{Domain: "", Outcome: OutcomeError, Err: "invalid"}},
		{"a..example", MailResult{Domain: "a..example", Outcome: OutcomeError, Err: "invalid"}},
	}
	r := newResolver(t, Config{Servers: []string{srv.Addr}})
	for _, tt := range tests {
		t.Run(tt.domain, func(t *testing.T) {
			got := r.LookupMail(context.Background(), tt.domain)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("LookupMail(%q)\n got %+v\nwant %+v", tt.domain, got, tt.want)
			}
		})
	}
}

func TestLookupMailResultIsACopy(t *testing.T) {
	srv := testkit.StartDNS(t)
	srv.AddRecord("corp.example. 300 IN MX 10 mx.corp.example.")
	r := newResolver(t, Config{Servers: []string{srv.Addr}})
	first := r.LookupMail(context.Background(), "corp.example")
	first.MX[0].Host = "tampered"
	if got := r.LookupMail(context.Background(), "corp.example"); got.MX[0].Host != "mx.corp.example" {
		t.Fatalf("cached result changed through a returned slice: %+v", got)
	}
}

func TestLookupMailTimeout(t *testing.T) {
	const delay = 3 * time.Second
	tests := []struct {
		name    string
		timeout time.Duration // per attempt
		ctx     func() (context.Context, context.CancelFunc)
	}{
		{"attempt timeout", 100 * time.Millisecond, func() (context.Context, context.CancelFunc) {
			return context.WithCancel(context.Background())
		}},
		{"ctx deadline", 10 * time.Second, func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 100*time.Millisecond)
		}},
		{"ctx cancelled", 10 * time.Second, func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			return ctx, cancel
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := testkit.StartDNS(t)
			srv.AddRecord("slow.example. 300 IN MX 10 mx.slow.example.")
			srv.SetDelay("slow.example.", delay)
			r := newResolver(t, Config{Servers: []string{srv.Addr}, Timeout: tt.timeout, Attempts: 2})
			ctx, cancel := tt.ctx()
			defer cancel()
			got := r.LookupMail(ctx, "slow.example")
			// Had the deadline been ignored, the lookup would have waited
			// for the server's answer, held for the delay.
			if n := srv.Answered(); srv.Queries() == 0 || n != 0 {
				t.Errorf("returned after the server answered %d of %d queries; deadline not respected", n, srv.Queries())
			}
			want := MailResult{Domain: "slow.example", Outcome: OutcomeError, Err: "timeout"}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestLookupMailAlreadyDoneContext(t *testing.T) {
	srv := testkit.StartDNS(t)
	srv.AddRecord("corp.example. 300 IN MX 10 mx.corp.example.")
	r := newResolver(t, Config{Servers: []string{srv.Addr}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := r.LookupMail(ctx, "corp.example"); got.Outcome != OutcomeError || got.Err != "timeout" {
		t.Fatalf("got %+v", got)
	}
	if n := srv.Queries(); n != 0 {
		t.Fatalf("%d queries sent for a cancelled context", n)
	}
}

func TestServerFallback(t *testing.T) {
	const rec = "corp.example. 300 IN MX 10 mx.corp.example."
	okResult := MailResult{Domain: "corp.example", Outcome: OutcomeOK, Rcode: "NOERROR", MX: []MX{{"mx.corp.example", 10}}}
	tests := []struct {
		name      string
		first     func(t *testing.T) (addr string, queries func() int)
		second    func(*testkit.DNSServer)
		want      MailResult
		firstSeen int // queries the first server gets, -1: not checked
	}{
		{"first refuses", func(t *testing.T) (string, func() int) {
			s := testkit.StartDNS(t)
			s.SetRcode("corp.example.", dns.RcodeRefused)
			return s.Addr, s.Queries
		}, func(s *testkit.DNSServer) { s.AddRecord(rec) }, okResult, 1},
		{"first servfails", func(t *testing.T) (string, func() int) {
			s := testkit.StartDNS(t)
			s.SetRcode("corp.example.", dns.RcodeServerFailure)
			return s.Addr, s.Queries
		}, func(s *testkit.DNSServer) { s.AddRecord(rec) }, okResult, 1},
		{"first is down", func(t *testing.T) (string, func() int) {
			return deadServer(t), nil
		}, func(s *testkit.DNSServer) { s.AddRecord(rec) }, okResult, -1},
		{"first times out", func(t *testing.T) (string, func() int) {
			s := testkit.StartDNS(t)
			s.AddRecord(rec)
			s.SetDelay("corp.example.", 5*time.Second)
			return s.Addr, s.Queries
		}, func(s *testkit.DNSServer) { s.AddRecord(rec) }, okResult, 1},
		// Refusals are not retried on later attempts; SERVFAIL is.
		{"both refuse", func(t *testing.T) (string, func() int) {
			s := testkit.StartDNS(t)
			s.SetRcode("corp.example.", dns.RcodeRefused)
			return s.Addr, s.Queries
		}, func(s *testkit.DNSServer) { s.SetRcode("corp.example.", dns.RcodeRefused) },
			MailResult{Domain: "corp.example", Outcome: OutcomeError, Rcode: "REFUSED", Err: "refused"}, 1},
		{"both servfail", func(t *testing.T) (string, func() int) {
			s := testkit.StartDNS(t)
			s.SetRcode("corp.example.", dns.RcodeServerFailure)
			return s.Addr, s.Queries
		}, func(s *testkit.DNSServer) { s.SetRcode("corp.example.", dns.RcodeServerFailure) },
			MailResult{Domain: "corp.example", Outcome: OutcomeError, Rcode: "SERVFAIL", Err: "servfail"}, 2},
		// An answer with an rcode outranks silence in the report.
		{"servfail after down", func(t *testing.T) (string, func() int) {
			return deadServer(t), nil
		}, func(s *testkit.DNSServer) { s.SetRcode("corp.example.", dns.RcodeServerFailure) },
			MailResult{Domain: "corp.example", Outcome: OutcomeError, Rcode: "SERVFAIL", Err: "servfail"}, -1},
		{"both down", func(t *testing.T) (string, func() int) {
			return deadServer(t), nil
		}, nil, MailResult{Domain: "corp.example", Outcome: OutcomeError, Err: "network"}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first, firstQueries := tt.first(t)
			second := deadServer(t)
			if tt.second != nil {
				s := testkit.StartDNS(t)
				tt.second(s)
				second = s.Addr
			}
			r := newResolver(t, Config{Servers: []string{first, second}, Timeout: time.Second, Attempts: 2})
			got := r.LookupMail(context.Background(), "corp.example")
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if tt.firstSeen >= 0 {
				if n := firstQueries(); n != tt.firstSeen {
					t.Errorf("first server got %d queries, want %d", n, tt.firstSeen)
				}
			}
		})
	}
}

func TestCache(t *testing.T) {
	type step struct {
		advance time.Duration
		queried bool // whether the lookup after advancing reaches the server
	}
	tests := []struct {
		name    string
		records []string
		setup   func(*testkit.DNSServer)
		domain  string
		steps   []step
	}{
		{"positive by TTL", []string{"corp.example. 300 IN MX 10 mx.corp.example."}, nil, "corp.example",
			[]step{{0, true}, {0, false}, {299 * time.Second, false}, {2 * time.Second, true}, {0, false}}},
		{"min TTL of the chain", []string{
			"alias.example. 30 IN CNAME corp.example.",
			"corp.example. 300 IN MX 10 mx.corp.example.",
		}, nil, "alias.example", []step{{0, true}, {29 * time.Second, false}, {2 * time.Second, true}}},
		{"TTL floor 5s", []string{"corp.example. 0 IN MX 10 mx.corp.example."}, nil, "corp.example",
			[]step{{0, true}, {4 * time.Second, false}, {2 * time.Second, true}}},
		{"TTL cap 1h", []string{"corp.example. 86400 IN MX 10 mx.corp.example."}, nil, "corp.example",
			[]step{{0, true}, {59 * time.Minute, false}, {2 * time.Minute, true}}},
		{"nxdomain by SOA minimum", nil, nil, "missing.example",
			[]step{{0, true}, {59 * time.Second, false}, {2 * time.Second, true}}},
		{"nxdomain by smaller SOA TTL", []string{
			"soa.example. 10 IN SOA ns.soa.example. h.soa.example. 1 2 3 4 3600",
		}, nil, "x.soa.example", []step{{0, true}, {9 * time.Second, false}, {2 * time.Second, true}}},
		{"no_records by SOA minimum", []string{"txt.example. 300 IN TXT \"x\""}, nil, "txt.example",
			[]step{{0, true}, {59 * time.Second, false}, {2 * time.Second, true}}},
		{"implicit MX by shortest TTL", []string{"a.example. 20 IN A 192.0.2.1"}, nil, "a.example",
			[]step{{0, true}, {19 * time.Second, false}, {2 * time.Second, true}}},
		{"null MX by its TTL", []string{"null.example. 120 IN MX 0 ."}, nil, "null.example",
			[]step{{0, true}, {119 * time.Second, false}, {2 * time.Second, true}}},
		{"servfail not cached", nil, func(s *testkit.DNSServer) { s.SetRcode("broken.example.", dns.RcodeServerFailure) },
			"broken.example", []step{{0, true}, {0, true}}},
		{"failed A lookup not cached", []string{"afail.example. 300 IN TXT \"x\""}, func(s *testkit.DNSServer) {
			s.SetRcodeFor("afail.example.", dns.TypeA, dns.RcodeServerFailure)
		}, "afail.example", []step{{0, true}, {0, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := testkit.StartDNS(t)
			for _, rr := range tt.records {
				srv.AddRecord(rr)
			}
			if tt.setup != nil {
				tt.setup(srv)
			}
			clk := newClock()
			r := newResolver(t, Config{Servers: []string{srv.Addr}, Now: clk.Now})
			for i, st := range tt.steps {
				clk.Advance(st.advance)
				before := srv.Queries()
				res := r.LookupMail(context.Background(), tt.domain)
				if queried := srv.Queries() > before; queried != st.queried {
					t.Fatalf("step %d (+%v): queried=%v, want %v (result %+v)", i, st.advance, queried, st.queried, res)
				}
			}
		})
	}
}

func TestCacheDisabledAndBounded(t *testing.T) {
	srv := testkit.StartDNS(t)
	srv.AddRecord("a.example. 300 IN MX 10 mx.a.example.")
	srv.AddRecord("b.example. 300 IN MX 10 mx.b.example.")
	srv.AddRecord("c.example. 300 IN MX 10 mx.c.example.")
	ctx := context.Background()

	off := newResolver(t, Config{Servers: []string{srv.Addr}, CacheSize: -1})
	off.LookupMail(ctx, "a.example")
	before := srv.Queries()
	off.LookupMail(ctx, "a.example")
	if srv.Queries() == before {
		t.Error("CacheSize -1 still served from a cache")
	}

	small := newResolver(t, Config{Servers: []string{srv.Addr}, CacheSize: 2})
	for _, d := range []string{"a.example", "b.example", "a.example", "c.example"} {
		small.LookupMail(ctx, d)
	}
	if n := small.mail.Len(); n != 2 {
		t.Fatalf("cache holds %d names, want 2", n)
	}
	// b was least recently used when c came in.
	before = srv.Queries()
	small.LookupMail(ctx, "a.example")
	if srv.Queries() != before {
		t.Error("recently used a.example was evicted")
	}
	small.LookupMail(ctx, "b.example")
	if srv.Queries() == before {
		t.Error("least recently used b.example was not evicted")
	}
}

func TestLookupMailSharesInFlightQueries(t *testing.T) {
	srv := testkit.StartDNS(t)
	srv.AddRecord("corp.example. 300 IN MX 10 mx.corp.example.")
	// The delay keeps the first query open while the others join it; the
	// start barrier makes them all arrive within that window even on a
	// loaded machine.
	srv.SetDelay("corp.example.", time.Second)
	// No cache, so only in-flight sharing can save queries.
	r := newResolver(t, Config{Servers: []string{srv.Addr}, CacheSize: -1, Timeout: 5 * time.Second})
	var wg, ready sync.WaitGroup
	start := make(chan struct{})
	results := make([]MailResult, 50)
	ready.Add(len(results))
	for i := range results {
		wg.Go(func() {
			ready.Done()
			<-start
			results[i] = r.LookupMail(context.Background(), "corp.example")
		})
	}
	ready.Wait()
	close(start)
	wg.Wait()
	if n := srv.Queries(); n != 1 {
		t.Errorf("50 concurrent lookups sent %d queries, want 1", n)
	}
	for i, res := range results {
		if res.Outcome != OutcomeOK || len(res.MX) != 1 {
			t.Fatalf("lookup %d: %+v", i, res)
		}
	}
}

func TestLookupHost(t *testing.T) {
	srv := testkit.StartDNS(t)
	for _, rr := range []string{
		"mx.corp.example. 300 IN AAAA 2001:db8::25",
		"mx.corp.example. 300 IN A 192.0.2.25",
		"mx.corp.example. 300 IN A 192.0.2.26",
		"v6.corp.example. 300 IN AAAA 2001:db8::26",
		"alias.corp.example. 300 IN CNAME mx.corp.example.",
		"txt.corp.example. 300 IN TXT \"x\"",
		"half.corp.example. 300 IN A 192.0.2.27",
	} {
		srv.AddRecord(rr)
	}
	srv.SetRcode("broken.corp.example.", dns.RcodeServerFailure)
	srv.SetRcodeFor("half.corp.example.", dns.TypeAAAA, dns.RcodeServerFailure)
	addrs := func(s ...string) []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	tests := []struct {
		host    string
		want    []netip.Addr
		wantErr error
	}{
		{"mx.corp.example", addrs("192.0.2.25", "192.0.2.26", "2001:db8::25"), nil},
		{"MX.Corp.Example.", addrs("192.0.2.25", "192.0.2.26", "2001:db8::25"), nil},
		{"v6.corp.example", addrs("2001:db8::26"), nil},
		{"alias.corp.example", addrs("192.0.2.25", "192.0.2.26", "2001:db8::25"), nil},
		{"half.corp.example", addrs("192.0.2.27"), nil},
		{"missing.corp.example", nil, ErrNoAddress},
		{"txt.corp.example", nil, ErrNoAddress},
		{"broken.corp.example", nil, ErrLookupFailed},
		{"bad..name", nil, ErrBadName},
	}
	r := newResolver(t, Config{Servers: []string{srv.Addr}})
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			got, err := r.LookupHost(context.Background(), tt.host)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
	// Answers, including "no address", come from the cache the second time.
	before := srv.Queries()
	for _, h := range []string{"mx.corp.example", "missing.corp.example", "txt.corp.example"} {
		if _, err := r.LookupHost(context.Background(), h); err != nil && !errors.Is(err, ErrNoAddress) {
			t.Fatal(err)
		}
	}
	if srv.Queries() != before {
		t.Errorf("cached host lookups sent %d queries", srv.Queries()-before)
	}
}

func TestLookupHostTimeout(t *testing.T) {
	srv := testkit.StartDNS(t)
	srv.AddRecord("slow.example. 300 IN A 192.0.2.1")
	srv.SetDelay("slow.example.", 3*time.Second)
	r := newResolver(t, Config{Servers: []string{srv.Addr}, Timeout: 10 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := r.LookupHost(ctx, "slow.example")
	if !errors.Is(err, ErrLookupFailed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want unavailable wrapping the deadline", err)
	}
}

func TestNew(t *testing.T) {
	if _, err := New(Config{Servers: []string{"127.0.0.1:53", "not a server"}}); err == nil {
		t.Errorf("invalid server: err = %v", err)
	}
	r, err := New(Config{Servers: []string{"10.0.0.2:53", "[::1]:5353"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.Servers(), []string{"10.0.0.2:53", "[::1]:5353"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Servers() = %v, want %v", got, want)
	}
	if r.timeout != 2*time.Second || r.attempts != 2 || r.mail.Cap() != 10000 {
		t.Errorf("defaults: timeout %v attempts %d cache %d", r.timeout, r.attempts, r.mail.Cap())
	}
	if def, err := New(Config{}); err != nil || len(def.Servers()) == 0 {
		t.Errorf("system servers: %v %v", def.Servers(), err)
	}
}
