package dnscheck

import (
	"context"
	"net/netip"
	"reflect"
	"testing"

	"github.com/evs-dev/evs/internal/testkit"
	"github.com/miekg/dns"
)

func TestBlocklisted(t *testing.T) {
	srv := testkit.StartDNS(t)
	srv.AddRecord("2.0.0.127.bl.test. 300 IN A 127.0.0.2")
	srv.AddRecord("2.0.0.127.bl.test. 300 IN A 127.0.0.4")
	srv.AddRecord("3.0.0.127.bl.test. 300 IN A 127.255.255.254")
	srv.AddRecord("1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.bl.test. 300 IN A 127.0.0.3")
	srv.SetRcode("5.0.0.127.bl.test.", dns.RcodeServerFailure)
	r := newResolver(t, Config{Servers: []string{srv.Addr}})
	cases := []struct {
		ip   string
		want Listing
	}{
		{"127.0.0.1", Listing{Zone: "bl.test"}},
		{"127.0.0.2", Listing{Zone: "bl.test", Listed: true, Codes: []string{"127.0.0.2", "127.0.0.4"}}},
		{"2001:db8::1", Listing{Zone: "bl.test", Listed: true, Codes: []string{"127.0.0.3"}}},
		{"::ffff:127.0.0.2", Listing{Zone: "bl.test", Listed: true, Codes: []string{"127.0.0.2", "127.0.0.4"}}},
		{"127.0.0.3", Listing{Zone: "bl.test", Error: "the list refused the query (127.255.255.254): use a resolver it serves"}},
		{"127.0.0.5", Listing{Zone: "bl.test", Error: "lookup failed: servfail"}},
	}
	for _, c := range cases {
		got := r.Blocklisted(context.Background(), netip.MustParseAddr(c.ip), "bl.test")
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Blocklisted(%s) = %+v, want %+v", c.ip, got, c.want)
		}
	}
	// Past the cache: a listing added now is seen by the next check.
	srv.AddRecord("1.0.0.127.bl.test. 300 IN A 127.0.0.2")
	if got := r.Blocklisted(context.Background(), netip.MustParseAddr("127.0.0.1"), "bl.test."); !got.Listed {
		t.Errorf("after listing: %+v, want listed", got)
	}
}

func TestConfirmHELO(t *testing.T) {
	srv := testkit.StartDNS(t)
	srv.AddRecord("probe.test. 300 IN A 127.0.0.1")
	srv.AddRecord("1.0.0.127.in-addr.arpa. 300 IN PTR Probe.Test.")
	srv.AddRecord("other.test. 300 IN A 127.0.0.9")
	srv.AddRecord("9.0.0.127.in-addr.arpa. 300 IN PTR somewhere.test.")
	srv.AddRecord("noptr.test. 300 IN A 127.0.0.8")
	r := newResolver(t, Config{Servers: []string{srv.Addr}})
	cases := []struct {
		name, ip string
		ok       bool
	}{
		{"probe.test", "127.0.0.1", true},
		{"probe.test", "", true},           // address unknown: the name resolves
		{"missing.test", "", false},        // the name does not resolve
		{"probe.test", "127.0.0.2", false}, // the name is not the address's
		{"other.test", "127.0.0.9", false}, // the PTR names another host
		{"noptr.test", "127.0.0.8", false}, // no PTR at all
	}
	for _, c := range cases {
		var ip netip.Addr
		if c.ip != "" {
			ip = netip.MustParseAddr(c.ip)
		}
		got := r.ConfirmHELO(context.Background(), c.name, ip)
		if got.OK != c.ok || got.Name != c.name || got.Detail == "" {
			t.Errorf("ConfirmHELO(%s, %s) = %+v, want ok %v", c.name, c.ip, got, c.ok)
		}
	}
}
