package testkit

// DNSServer is a small authoritative-style DNS server on loopback, so tests
// of the DNS stage exercise real UDP and TCP exchanges instead of fakes.

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// DNSServer answers queries from the records given to AddRecord. It serves UDP
// and TCP on the same loopback port, as resolvers expect when they fall back
// to TCP after a truncated answer.
type DNSServer struct {
	// Addr is "127.0.0.1:PORT".
	Addr string

	tb       testing.TB
	queries  atomic.Int64
	answered atomic.Int64
	stop     chan struct{}

	mu      sync.Mutex
	records map[string][]dns.RR // by lower-case FQDN
	rcodes  map[string]int      // by name, or name+"/"+type for SetRcodeFor
	asked   map[string]int      // queries by name+"/"+type
	delays  map[string]time.Duration
	trunc   map[string]bool
}

// StartDNS listens on a free loopback port and serves until the test ends.
func StartDNS(tb testing.TB) *DNSServer {
	tb.Helper()
	s := &DNSServer{
		tb:      tb,
		stop:    make(chan struct{}),
		records: map[string][]dns.RR{},
		rcodes:  map[string]int{},
		asked:   map[string]int{},
		delays:  map[string]time.Duration{},
		trunc:   map[string]bool{},
	}
	pc, ln := listenPair(tb)
	s.Addr = pc.LocalAddr().String()

	udp := &dns.Server{PacketConn: pc, Handler: s}
	tcp := &dns.Server{Listener: ln, Handler: s}
	var started sync.WaitGroup
	started.Add(2)
	udp.NotifyStartedFunc = started.Done
	tcp.NotifyStartedFunc = started.Done
	errs := make(chan error, 2)
	go func() { errs <- udp.ActivateAndServe() }()
	go func() { errs <- tcp.ActivateAndServe() }()
	ready := make(chan struct{})
	go func() { started.Wait(); close(ready) }()
	select {
	case <-ready:
	case err := <-errs:
		tb.Fatalf("testkit: DNS server: serve: %v", err)
	case <-time.After(5 * time.Second):
		tb.Fatal("testkit: DNS server: server did not start within 5s")
	}

	tb.Cleanup(func() {
		// Release delayed handlers first so shutdown does not wait on them.
		close(s.stop)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = udp.ShutdownContext(ctx)
		_ = tcp.ShutdownContext(ctx)
	})
	return s
}

// listenPair binds UDP on an ephemeral port and TCP on the same port. The TCP
// port may already be taken by someone else, so a few ports are tried.
func listenPair(tb testing.TB) (net.PacketConn, net.Listener) {
	tb.Helper()
	var lastErr error
	for range 20 {
		pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("testkit: DNS server: listen udp: %v", err)
		}
		ln, err := net.Listen("tcp4", pc.LocalAddr().String())
		if err == nil {
			return pc, ln
		}
		lastErr = err
		pc.Close()
	}
	tb.Fatalf("testkit: DNS server: no port free for both UDP and TCP: %v", lastErr)
	return nil, nil
}

// AddRecord adds one record in zone-file syntax, for example
// "corp.example. 300 IN MX 10 mx.corp.example.". An SOA record added for a
// zone is used in negative answers below it; otherwise one with TTL and
// minimum 60 is made up.
func (s *DNSServer) AddRecord(rr string) {
	s.tb.Helper()
	r, err := dns.NewRR(rr)
	if err != nil {
		s.tb.Fatalf("testkit: DNS server: AddRecord(%q): %v", rr, err)
	}
	if r == nil {
		s.tb.Fatalf("testkit: DNS server: AddRecord(%q): no record", rr)
	}
	name := canon(r.Header().Name)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records[name] = append(s.records[name], r)
}

// SetRcode makes every query for name (any type) get rcode and no records,
// e.g. dns.RcodeServerFailure or dns.RcodeRefused. dns.RcodeSuccess clears it.
func (s *DNSServer) SetRcode(name string, rcode int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rcode == dns.RcodeSuccess {
		delete(s.rcodes, canon(name))
		return
	}
	s.rcodes[canon(name)] = rcode
}

// SetRcodeFor is SetRcode for one query type only, so that for example the
// MX query succeeds while the A query fails. It takes precedence over
// SetRcode; dns.RcodeSuccess clears it.
func (s *DNSServer) SetRcodeFor(name string, qtype uint16, rcode int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := typedKey(canon(name), qtype)
	if rcode == dns.RcodeSuccess {
		delete(s.rcodes, key)
		return
	}
	s.rcodes[key] = rcode
}

func typedKey(name string, qtype uint16) string {
	return name + "/" + dns.TypeToString[qtype]
}

// SetDelay holds answers for name back by d; zero removes the delay.
func (s *DNSServer) SetDelay(name string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d <= 0 {
		delete(s.delays, canon(name))
		return
	}
	s.delays[canon(name)] = d
}

// Truncate makes UDP answers for name carry the TC bit and no records, so a
// client must retry over TCP, where answers stay complete.
func (s *DNSServer) Truncate(name string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.trunc[canon(name)] = true
	} else {
		delete(s.trunc, canon(name))
	}
}

// Queries reports how many queries arrived over UDP and TCP together.
func (s *DNSServer) Queries() int { return int(s.queries.Load()) }

// Answered reports how many replies the server sent: a query still held
// by SetDelay has none yet.
func (s *DNSServer) Answered() int { return int(s.answered.Load()) }

// QueriesFor reports how many queries for name and type qtype arrived: a
// test counts the lookups a periodic check made.
func (s *DNSServer) QueriesFor(name string, qtype uint16) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[typedKey(canon(name), qtype)]
}

func canon(name string) string { return strings.ToLower(dns.Fqdn(name)) }

// ServeDNS implements dns.Handler.
func (s *DNSServer) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	s.queries.Add(1)
	m := new(dns.Msg)
	if len(req.Question) != 1 {
		m.SetRcode(req, dns.RcodeFormatError)
		_ = w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	name := canon(q.Name)
	_, udp := w.RemoteAddr().(*net.UDPAddr)

	s.mu.Lock()
	s.asked[typedKey(name, q.Qtype)]++
	delay := s.delays[name]
	rcode, forced := s.rcodes[typedKey(name, q.Qtype)]
	if !forced {
		rcode, forced = s.rcodes[name]
	}
	trunc := s.trunc[name] && udp
	s.mu.Unlock()

	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.stop:
			t.Stop()
			return
		}
	}

	m.SetReply(req)
	m.RecursionAvailable = true
	size := dns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(opt.UDPSize(), false)
		size = max(int(opt.UDPSize()), dns.MinMsgSize)
	}
	switch {
	case forced:
		m.Rcode = rcode
	case trunc:
		m.Truncated = true
	default:
		s.answer(m, name, q.Qtype)
		if udp {
			m.Truncate(size)
		}
	}
	_ = w.WriteMsg(m)
	s.answered.Add(1)
}

// answer fills m the way an authoritative server with the whole namespace
// would: CNAME chains followed, NXDOMAIN only when the name and everything
// below it are absent, and an SOA in the authority section of negative
// answers so clients can cache them (RFC 2308).
func (s *DNSServer) answer(m *dns.Msg, name string, qtype uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m.Authoritative = true
	for hop := 0; hop < 8; hop++ {
		var match []dns.RR
		var cname dns.RR
		for _, rr := range s.records[name] {
			switch {
			case rr.Header().Rrtype == qtype || qtype == dns.TypeANY:
				match = append(match, dns.Copy(rr))
			case rr.Header().Rrtype == dns.TypeCNAME:
				cname = rr
			}
		}
		if len(match) > 0 {
			m.Answer = append(m.Answer, match...)
			return
		}
		if cname == nil {
			break
		}
		m.Answer = append(m.Answer, dns.Copy(cname))
		name = canon(cname.(*dns.CNAME).Target)
	}
	if !s.exists(name) {
		m.Rcode = dns.RcodeNameError
	}
	m.Ns = append(m.Ns, s.soaFor(name))
}

// exists reports whether name owns records or has descendants that do; an
// empty non-terminal exists and gets NOERROR (RFC 8020).
func (s *DNSServer) exists(name string) bool {
	if len(s.records[name]) > 0 {
		return true
	}
	for owner := range s.records {
		if strings.HasSuffix(owner, "."+name) {
			return true
		}
	}
	return false
}

// soaFor returns the SOA of the closest enclosing zone given to AddRecord,
// or a made-up one at the name's last two labels with TTL and minimum 60.
func (s *DNSServer) soaFor(name string) dns.RR {
	for n := name; ; {
		for _, rr := range s.records[n] {
			if rr.Header().Rrtype == dns.TypeSOA {
				return dns.Copy(rr)
			}
		}
		i := strings.IndexByte(n, '.')
		if i < 0 || i == len(n)-1 {
			break
		}
		n = n[i+1:]
	}
	labels := dns.SplitDomainName(name)
	apex := "."
	if len(labels) >= 2 {
		apex = dns.Fqdn(strings.Join(labels[len(labels)-2:], "."))
	} else if len(labels) == 1 {
		apex = dns.Fqdn(labels[0])
	}
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: apex, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
		Ns:      "ns." + strings.TrimPrefix(apex, "."),
		Mbox:    "hostmaster." + strings.TrimPrefix(apex, "."),
		Serial:  1,
		Refresh: 3600,
		Retry:   600,
		Expire:  86400,
		Minttl:  60,
	}
}
