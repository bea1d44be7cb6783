package dnscheck

import (
	"context"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
	"github.com/miekg/dns"
)

// recordingDialer keeps every query the resolver writes, to check what goes
// on the wire.
type recordingDialer struct {
	mu   sync.Mutex
	sent []sentQuery
}

type sentQuery struct {
	network string
	msg     *dns.Msg
}

func (d *recordingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if uc, ok := c.(*net.UDPConn); ok {
		// Still a net.PacketConn, as datagram framing requires.
		return &recordingUDP{UDPConn: uc, d: d}, nil
	}
	return &recordingTCP{Conn: c, d: d}, nil
}

func (d *recordingDialer) record(network string, wire []byte) {
	m := new(dns.Msg)
	if err := m.Unpack(wire); err == nil {
		d.mu.Lock()
		d.sent = append(d.sent, sentQuery{network, m})
		d.mu.Unlock()
	}
}

type recordingUDP struct {
	*net.UDPConn
	d *recordingDialer
}

func (c *recordingUDP) Write(p []byte) (int, error) {
	c.d.record("udp", p)
	return c.UDPConn.Write(p)
}

type recordingTCP struct {
	net.Conn
	d *recordingDialer
}

func (c *recordingTCP) Write(p []byte) (int, error) {
	if len(p) >= 2 {
		c.d.record("tcp", p[2:]) // after the length prefix
	}
	return c.Conn.Write(p)
}

func TestQueriesOnTheWire(t *testing.T) {
	srv := testkit.StartDNS(t)
	srv.AddRecord("tc.example. 300 IN MX 10 mx.tc.example.")
	srv.Truncate("tc.example.", true)
	d := &recordingDialer{}
	r := newResolver(t, Config{Servers: []string{srv.Addr}, Dialer: d})
	if got := r.LookupMail(context.Background(), "TC.Example"); got.Outcome != OutcomeOK {
		t.Fatalf("got %+v", got)
	}
	if len(d.sent) != 2 || d.sent[0].network != "udp" || d.sent[1].network != "tcp" {
		t.Fatalf("sent %+v, want one UDP then one TCP query", d.sent)
	}
	for _, q := range d.sent {
		opt := q.msg.IsEdns0()
		if opt == nil || opt.UDPSize() != 1232 {
			t.Errorf("%s query without EDNS0 1232: %v", q.network, q.msg)
		}
		if !q.msg.RecursionDesired {
			t.Errorf("%s query without RD", q.network)
		}
		if got := q.msg.Question[0]; got.Name != "tc.example." || got.Qtype != dns.TypeMX {
			t.Errorf("%s question %v", q.network, got)
		}
	}
}

// startHandler serves h over UDP on loopback for the test's duration.
func startHandler(t *testing.T, h dns.HandlerFunc) string {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	s := &dns.Server{PacketConn: pc, Handler: h, NotifyStartedFunc: func() { close(started) }}
	go func() { _ = s.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = s.Shutdown() })
	return pc.LocalAddr().String()
}

func TestFormerrRetriedWithoutEDNS(t *testing.T) {
	var mu sync.Mutex
	var withOpt, without int
	addr := startHandler(t, func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		mu.Lock()
		defer mu.Unlock()
		if req.IsEdns0() != nil {
			withOpt++
			m.SetRcode(req, dns.RcodeFormatError) // a pre-EDNS server
		} else {
			without++
			m.SetReply(req)
			mx, _ := dns.NewRR("old.example. 300 IN MX 10 mx.old.example.")
			m.Answer = append(m.Answer, mx)
		}
		_ = w.WriteMsg(m)
	})
	r := newResolver(t, Config{Servers: []string{addr}})
	got := r.LookupMail(context.Background(), "old.example")
	want := MailResult{Domain: "old.example", Outcome: OutcomeOK, Rcode: "NOERROR", MX: []MX{{"mx.old.example", 10}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if withOpt != 1 || without != 1 {
		t.Fatalf("queries with EDNS0 %d, without %d; want 1 and 1", withOpt, without)
	}
}

func TestForeignRepliesIgnored(t *testing.T) {
	// A reply for another question or ID (a late or spoofed datagram) is
	// skipped; the real one that follows is used.
	addr := startHandler(t, func(w dns.ResponseWriter, req *dns.Msg) {
		bogus := new(dns.Msg)
		bogus.SetReply(req)
		bogus.Id = req.Id + 1
		bogus.Rcode = dns.RcodeNameError
		_ = w.WriteMsg(bogus)
		other := new(dns.Msg)
		other.SetReply(req)
		other.Question[0].Name = "evil.example."
		other.Rcode = dns.RcodeNameError
		_ = w.WriteMsg(other)
		_, _ = w.Write([]byte{1, 2, 3}) // garbage
		m := new(dns.Msg)
		m.SetReply(req)
		mx, _ := dns.NewRR("corp.example. 300 IN MX 10 mx.corp.example.")
		m.Answer = append(m.Answer, mx)
		_ = w.WriteMsg(m)
	})
	r := newResolver(t, Config{Servers: []string{addr}})
	if got := r.LookupMail(context.Background(), "corp.example"); got.Outcome != OutcomeOK {
		t.Fatalf("got %+v, want ok from the matching reply", got)
	}
}

func TestNegativeTTL(t *testing.T) {
	soa := func(ttl, minimum uint32) dns.RR {
		return &dns.SOA{Hdr: dns.RR_Header{Name: "example.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
			Ns: "ns.example.", Mbox: "h.example.", Minttl: minimum}
	}
	tests := []struct {
		name string
		ns   []dns.RR
		want time.Duration
	}{
		{"no SOA", nil, 5 * time.Minute},
		{"minimum smaller", []dns.RR{soa(3600, 60)}, time.Minute},
		{"TTL smaller", []dns.RR{soa(30, 3600)}, 30 * time.Second},
		{"floor", []dns.RR{soa(0, 0)}, 5 * time.Second},
		{"cap", []dns.RR{soa(86400, 86400)}, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := negativeTTL(&dns.Msg{Ns: tt.ns}); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}
