package testkit_test

import (
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
	"github.com/miekg/dns"
)

func query(t *testing.T, addr, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 2 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(1232, false)
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s %s: %v", network, name, dns.TypeToString[qtype], err)
	}
	return r
}

func TestAnswers(t *testing.T) {
	s := testkit.StartDNS(t)
	s.AddRecord("corp.example. 300 IN MX 10 mx.corp.example.")
	s.AddRecord("mx.corp.example. 300 IN A 192.0.2.1")
	s.AddRecord("alias.example. 120 IN CNAME corp.example.")
	s.AddRecord("a.b.deep.example. 300 IN A 192.0.2.2")
	s.AddRecord("soa.example. 30 IN SOA ns.soa.example. h.soa.example. 1 2 3 4 7")
	s.SetRcode("fail.example.", dns.RcodeServerFailure)
	s.SetRcode("Refuse.Example", dns.RcodeRefused)
	s.SetRcodeFor("corp.example.", dns.TypeAAAA, dns.RcodeServerFailure)

	tests := []struct {
		name      string
		qtype     uint16
		rcode     int
		answers   int
		soaMinTTL uint32 // 0: no SOA expected
	}{
		{"corp.example.", dns.TypeMX, dns.RcodeSuccess, 1, 0},
		{"CORP.example.", dns.TypeMX, dns.RcodeSuccess, 1, 0},
		{"corp.example.", dns.TypeA, dns.RcodeSuccess, 0, 60},
		{"corp.example.", dns.TypeAAAA, dns.RcodeServerFailure, 0, 0},
		{"alias.example.", dns.TypeMX, dns.RcodeSuccess, 2, 0},
		{"missing.example.", dns.TypeMX, dns.RcodeNameError, 0, 60},
		{"b.deep.example.", dns.TypeA, dns.RcodeSuccess, 0, 60}, // empty non-terminal
		{"x.soa.example.", dns.TypeMX, dns.RcodeNameError, 0, 7},
		{"fail.example.", dns.TypeMX, dns.RcodeServerFailure, 0, 0},
		{"refuse.example.", dns.TypeA, dns.RcodeRefused, 0, 0},
	}
	for _, tt := range tests {
		for _, network := range []string{"udp", "tcp"} {
			t.Run(network+"/"+tt.name+"/"+dns.TypeToString[tt.qtype], func(t *testing.T) {
				r := query(t, s.Addr, network, tt.name, tt.qtype)
				if r.Rcode != tt.rcode {
					t.Fatalf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tt.rcode])
				}
				if len(r.Answer) != tt.answers {
					t.Fatalf("%d answers, want %d: %v", len(r.Answer), tt.answers, r.Answer)
				}
				var soa *dns.SOA
				for _, rr := range r.Ns {
					if x, ok := rr.(*dns.SOA); ok {
						soa = x
					}
				}
				switch {
				case tt.soaMinTTL == 0 && soa != nil:
					t.Fatalf("unexpected SOA %v", soa)
				case tt.soaMinTTL != 0 && (soa == nil || soa.Minttl != tt.soaMinTTL):
					t.Fatalf("SOA %v, want minimum %d", soa, tt.soaMinTTL)
				}
			})
		}
	}
	if got := s.Queries(); got != 2*len(tests) {
		t.Errorf("Queries() = %d, want %d", got, 2*len(tests))
	}
}

func TestTruncateOnlyOverUDP(t *testing.T) {
	s := testkit.StartDNS(t)
	s.AddRecord("big.example. 300 IN MX 10 mx.big.example.")
	s.Truncate("big.example.", true)
	r := query(t, s.Addr, "udp", "big.example.", dns.TypeMX)
	if !r.Truncated || len(r.Answer) != 0 {
		t.Fatalf("udp: TC=%v answers=%d, want TC and none", r.Truncated, len(r.Answer))
	}
	r = query(t, s.Addr, "tcp", "big.example.", dns.TypeMX)
	if r.Truncated || len(r.Answer) != 1 {
		t.Fatalf("tcp: TC=%v answers=%d, want full answer", r.Truncated, len(r.Answer))
	}
	s.Truncate("big.example.", false)
	if r = query(t, s.Addr, "udp", "big.example.", dns.TypeMX); r.Truncated {
		t.Fatal("udp still truncated after Truncate(false)")
	}
}

func TestDelay(t *testing.T) {
	s := testkit.StartDNS(t)
	s.AddRecord("slow.example. 300 IN A 192.0.2.1")
	s.SetDelay("slow.example.", time.Second)
	c := &dns.Client{Timeout: 100 * time.Millisecond}
	m := new(dns.Msg)
	m.SetQuestion("slow.example.", dns.TypeA)
	if _, _, err := c.Exchange(m, s.Addr); err == nil {
		t.Fatal("delayed answer arrived before the client timeout")
	}
	s.SetDelay("slow.example.", 0)
	if r := query(t, s.Addr, "udp", "slow.example.", dns.TypeA); len(r.Answer) != 1 {
		t.Fatalf("answers %v", r.Answer)
	}
}
