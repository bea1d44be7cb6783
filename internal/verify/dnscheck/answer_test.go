package dnscheck

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func packedAnswer(tb testing.TB, rrs ...string) []byte {
	tb.Helper()
	m := new(dns.Msg)
	m.SetQuestion("corp.example.", dns.TypeMX)
	m.Response = true
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			tb.Fatal(err)
		}
		m.Answer = append(m.Answer, rr)
	}
	b, err := m.Pack()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// FuzzMXAnswer feeds arbitrary server replies to the MX answer reader: it
// must never panic and must only report well-formed results.
func FuzzMXAnswer(f *testing.F) {
	f.Add(packedAnswer(f, "corp.example. 300 IN MX 10 mx.corp.example.", "corp.example. 60 IN MX 5 MX.corp.example."))
	f.Add(packedAnswer(f, "corp.example. 300 IN MX 0 ."))
	f.Add(packedAnswer(f, "corp.example. 300 IN MX 0 .", "corp.example. 300 IN MX 1 a.example."))
	f.Add(packedAnswer(f, "corp.example. 30 IN CNAME b.example.", "b.example. 30 IN CNAME corp.example.", "b.example. 300 IN MX 1 a.example."))
	f.Add(packedAnswer(f, "other.example. 300 IN MX 10 mx.other.example."))
	f.Add(packedAnswer(f))
	f.Fuzz(func(t *testing.T, wire []byte) {
		m := new(dns.Msg)
		if err := m.Unpack(wire); err != nil {
			return
		}
		res, ttl, done := mxAnswer(m, "corp.example")
		if ttl < minCacheTTL || ttl > maxCacheTTL {
			t.Fatalf("ttl %v outside the cache bounds", ttl)
		}
		if res.Implicit || res.Err != "" || res.Domain != "corp.example" {
			t.Fatalf("unexpected fields %+v", res)
		}
		if !done {
			if len(res.MX) != 0 {
				t.Fatalf("no decision but MX %v", res.MX)
			}
			return
		}
		switch res.Outcome {
		case OutcomeNullMX:
			if len(res.MX) != 0 {
				t.Fatalf("null MX with hosts %v", res.MX)
			}
		case OutcomeOK:
			if len(res.MX) == 0 {
				t.Fatal("ok without hosts")
			}
			seen := map[string]bool{}
			for _, mx := range res.MX {
				if mx.Host == "" || strings.HasSuffix(mx.Host, ".") || mx.Host != strings.ToLower(mx.Host) || seen[mx.Host] {
					t.Fatalf("bad or repeated host %q in %v", mx.Host, res.MX)
				}
				seen[mx.Host] = true
			}
			if !slices.IsSortedFunc(res.MX, func(a, b MX) int {
				if a.Pref != b.Pref {
					return int(a.Pref) - int(b.Pref)
				}
				return strings.Compare(a.Host, b.Host)
			}) {
				t.Fatalf("MX not sorted: %v", res.MX)
			}
		default:
			t.Fatalf("outcome %q from an MX answer", res.Outcome)
		}
	})
}

func TestMXAnswer(t *testing.T) {
	tests := []struct {
		name    string
		rrs     []string
		outcome Outcome // "" when the caller must fall back to addresses
		mx      []MX
		ttl     time.Duration
	}{
		{"duplicate host keeps lowest preference",
			[]string{"corp.example. 300 IN MX 20 MX.corp.example.", "corp.example. 100 IN MX 10 mx.corp.example."},
			OutcomeOK, []MX{{"mx.corp.example", 10}}, 100 * time.Second},
		{"records for another owner are ignored",
			[]string{"other.example. 300 IN MX 10 mx.other.example."}, "", nil, time.Hour},
		{"CNAME loop ends",
			[]string{"corp.example. 30 IN CNAME b.example.", "b.example. 40 IN CNAME corp.example.", "b.example. 300 IN MX 1 a.example."},
			OutcomeOK, []MX{{"a.example", 1}}, 30 * time.Second},
		{"several null MX", []string{"corp.example. 300 IN MX 0 .", "corp.example. 300 IN MX 10 ."}, OutcomeNullMX, nil, 300 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := new(dns.Msg)
			if err := m.Unpack(packedAnswer(t, tt.rrs...)); err != nil {
				t.Fatal(err)
			}
			res, ttl, done := mxAnswer(m, "corp.example")
			if done != (tt.outcome != "") || (done && res.Outcome != tt.outcome) {
				t.Fatalf("done=%v outcome %q, want %q", done, res.Outcome, tt.outcome)
			}
			if !slices.Equal(res.MX, tt.mx) || ttl != tt.ttl {
				t.Fatalf("MX %v ttl %v, want %v %v", res.MX, ttl, tt.mx, tt.ttl)
			}
		})
	}
}
