package config_test

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/config"
)

// refusedByDefault holds an address inside every special-purpose range the
// contract names (section 9), at both ends of the range where it matters.
var refusedByDefault = []string{
	// IPv4
	"0.0.0.0", "0.255.255.255",
	"10.0.0.1", "10.255.255.255",
	"100.64.0.1", "100.127.255.254",
	"127.0.0.1", "127.255.255.254",
	"169.254.169.254", "169.254.0.1",
	"172.16.0.1", "172.31.255.255",
	"192.0.0.1", "192.0.0.9",
	"192.0.2.1",
	"192.31.196.1",
	"192.52.193.1",
	"192.88.99.1",
	"192.168.0.1", "192.168.255.255",
	"192.175.48.1",
	"198.18.0.1", "198.19.255.255",
	"198.51.100.7",
	"203.0.113.9",
	"224.0.0.1", "239.255.255.255",
	"240.0.0.1", "255.255.255.254",
	"255.255.255.255",
	// IPv6
	"::", "::1",
	"::127.0.0.1", // IPv4-compatible, deprecated
	"100::1",
	"2001::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2", // Teredo
	"2001:1ff:ffff::1", // end of 2001::/23
	"2001:db8::25",
	"3fff::1", "3fff:fff:ffff::1",
	"fc00::1", "fd00::1", "fdff:ffff::1",
	"fe80::1", "fe80::1%eth0", "febf::1",
	"fec0::1",
	"ff02::1", "ff0e::fb",
	"64:ff9b:1::a00:1", "64:ff9b:1::808:808", // NAT64 local-use, refused whatever it embeds
	"5f00::1",
	"4000::1", "::ffff:0:a00:1", // outside 2000::/3
	// IPv4-mapped forms of refused IPv4 addresses
	"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::ffff:0.0.0.0", "::ffff:255.255.255.255",
	// NAT64 well-known prefix embedding refused IPv4 addresses
	"64:ff9b::127.0.0.1", "64:ff9b::a9fe:a9fe", "64:ff9b::192.168.1.1", "64:ff9b::100.64.0.1",
	// 6to4 embedding refused IPv4 addresses
	"2002:7f00:1::1", "2002:a00:1::", "2002:a9fe:a9fe::1", "2002:c0a8:101::1",
}

var allowedByDefault = []string{
	// IPv4 just outside the ranges
	"1.1.1.1", "8.8.8.8", "9.255.255.255", "11.0.0.0",
	"100.63.255.255", "100.128.0.0",
	"126.255.255.255", "128.0.0.0",
	"169.253.255.255", "169.255.0.0",
	"172.15.255.255", "172.32.0.0",
	"192.0.1.1", "192.0.3.0", "192.167.255.255", "192.169.0.0",
	"198.17.255.255", "198.20.0.0",
	"203.0.112.255", "203.0.114.0",
	"223.255.255.255",
	// IPv6 global unicast
	"2001:200::1", // just past 2001::/23
	"2001:4860:4860::8888", "2606:4700::1111", "2a00:1450:4001::1b",
	"3ffe::1", "3fff:1000::1",
	// IPv4 forms of a public IPv4 address
	"::ffff:8.8.8.8", "64:ff9b::8.8.8.8", "2002:808:808::1",
}

func TestDefaultPolicy(t *testing.T) {
	policies := map[string]*config.EgressPolicy{"nil": nil, "empty": mustParse(t, "")}
	for pname, p := range policies {
		for _, s := range refusedByDefault {
			a := netip.MustParseAddr(s)
			if p.Allowed(a) {
				t.Errorf("%s policy allows %s", pname, s)
			}
			err := p.Check(a)
			var re *config.EgressRefusedError
			if !errors.Is(err, config.ErrEgressRefused) || !errors.As(err, &re) || re.Name == "" {
				t.Errorf("%s policy: Check(%s) = %v, want a named *RefusedError", pname, s, err)
			}
		}
		for _, s := range allowedByDefault {
			if a := netip.MustParseAddr(s); !p.Allowed(a) {
				t.Errorf("%s policy refuses %s: %v", pname, s, p.Check(a))
			}
		}
	}
	if (*config.EgressPolicy)(nil).Allowed(netip.Addr{}) {
		t.Error("the zero Addr is allowed")
	}
}

func TestRefusedErrorNamesTheRange(t *testing.T) {
	tests := []struct{ addr, rng, name string }{
		{"169.254.169.254", "169.254.0.0/16", "link-local"},
		{"::ffff:10.1.2.3", "10.0.0.0/8", "embedded IPv4"},
		{"64:ff9b::7f00:1", "127.0.0.0/8", "loopback"},
		{"2001:0:1::1", "2001::/32", "Teredo"},
		{"fd12::1", "fc00::/7", "unique local"},
	}
	for _, tc := range tests {
		var re *config.EgressRefusedError
		if err := (*config.EgressPolicy)(nil).Check(netip.MustParseAddr(tc.addr)); !errors.As(err, &re) {
			t.Fatalf("Check(%s) = %v", tc.addr, err)
		}
		if re.Range.String() != tc.rng || !strings.Contains(re.Name, tc.name) || !strings.Contains(re.Error(), tc.addr) {
			t.Errorf("Check(%s) = %+v %q, want range %s named %q", tc.addr, re, re.Error(), tc.rng, tc.name)
		}
	}
}

func TestAllowlist(t *testing.T) {
	tests := []struct {
		allow   string
		allowed []string
		refused []string
	}{
		{"127.0.0.0/8",
			[]string{"127.0.0.1", "127.1.2.3", "::ffff:127.0.0.1", "64:ff9b::127.0.0.1", "2002:7f00:1::1", "8.8.8.8"},
			[]string{"::1", "10.0.0.1", "169.254.169.254", "fd00::1"}},
		{"10.1.0.0/16, fd00:1::/32",
			[]string{"10.1.255.255", "::ffff:10.1.0.1", "fd00:1::25"},
			[]string{"10.2.0.1", "10.0.255.255", "fd00:2::25", "127.0.0.1"}},
		{"::1/128", []string{"::1"}, []string{"127.0.0.1", "::2"}},
		// Host bits are ignored: this is 192.168.0.0/16.
		{"192.168.7.9/16", []string{"192.168.200.1"}, []string{"172.16.0.1", "10.0.0.1"}},
		{"::ffff:127.0.0.0/104", []string{"::ffff:127.0.0.1", "127.0.0.1"}, []string{"::ffff:10.0.0.1", "10.0.0.1"}},
		{"169.254.169.254/32", []string{"169.254.169.254"}, []string{"169.254.169.253"}},
	}
	for _, tc := range tests {
		p := mustParse(t, tc.allow)
		for _, s := range tc.allowed {
			if a := netip.MustParseAddr(s); !p.Allowed(a) {
				t.Errorf("allow %q: %s refused: %v", tc.allow, s, p.Check(a))
			}
		}
		for _, s := range tc.refused {
			if p.Allowed(netip.MustParseAddr(s)) {
				t.Errorf("allow %q: %s allowed", tc.allow, s)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ in, names string }{
		{"127.0.0.1", "127.0.0.1"},
		{"127.0.0.0/8,10.0.0.0", "10.0.0.0"},
		{"10.0.0.0/33", "10.0.0.0/33"},
		{"fd00::/129", "fd00::/129"},
		{"localhost/8", "localhost/8"},
		{"127.0.0.0/8,", "entry 2"},
		{",127.0.0.0/8", "entry 1"},
		{"127.0.0.0/8;10.0.0.0/8", "127.0.0.0/8;10.0.0.0/8"},
		{"*", "*"},
	}
	for _, tc := range tests {
		p, err := config.ParseEgress(tc.in)
		if err == nil {
			t.Errorf("Parse(%q) = %v, want an error", tc.in, p.Allowlist())
			continue
		}
		if !strings.Contains(err.Error(), tc.names) {
			t.Errorf("Parse(%q) error %q does not name %q", tc.in, err, tc.names)
		}
	}
	for _, ok := range []string{"", "  ", " 127.0.0.0/8 , ::1/128 "} {
		if _, err := config.ParseEgress(ok); err != nil {
			t.Errorf("Parse(%q): %v", ok, err)
		}
	}
}

func TestControl(t *testing.T) {
	p := mustParse(t, "127.0.0.2/32")
	tests := []struct {
		address string
		ok      bool
	}{
		{"8.8.8.8:25", true},
		{"[2001:4860:4860::8888]:25", true},
		{"127.0.0.2:25", true},
		{"127.0.0.1:25", false},
		{"[::ffff:169.254.169.254]:80", false},
		{"[fe80::1%lo]:25", false},
		{"mx.example:25", false}, // a name was not resolved: fail closed
		{"8.8.8.8", false},
	}
	for _, tc := range tests {
		err := p.Control("tcp", tc.address, nil)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, config.ErrEgressRefused)) {
			t.Errorf("Control(%s) = %v, want ok=%v", tc.address, err, tc.ok)
		}
	}
}

// TestControlOnADialer checks the hook where it is meant to run: a
// net.Dialer dialling a name that resolves to loopback is stopped before
// the connection is made.
func TestControlOnADialer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())

	d := &net.Dialer{Control: mustParse(t, "").Control}
	c, err := d.Dial("tcp", net.JoinHostPort("localhost", port))
	if err == nil {
		c.Close()
		t.Fatal("dialled localhost with the default policy")
	}
	if !errors.Is(err, config.ErrEgressRefused) {
		t.Errorf("dial error %v is not ErrRefused", err)
	}
	select {
	case <-accepted:
		t.Error("the listener accepted a connection")
	default:
	}

	d = &net.Dialer{Control: mustParse(t, "127.0.0.0/8").Control}
	c, err = d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("allowed dial: %v", err)
	}
	c.Close()
	<-accepted
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "127.0.0.0/8", "10.0.0.0/8, fd00::/8", "::ffff:127.0.0.0/104", "1.2.3.4/33", ",", "a/b,c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := config.ParseEgress(s)
		if err != nil {
			if p != nil {
				t.Fatalf("Parse(%q) returned a policy with error %v", s, err)
			}
			return
		}
		// Every accepted entry is a valid CIDR whose network address the
		// policy allows, and the list parses back to itself.
		var parts []string
		for _, pfx := range p.Allowlist() {
			if !pfx.IsValid() || pfx != pfx.Masked() {
				t.Fatalf("Parse(%q) kept %v", s, pfx)
			}
			if !p.Allowed(pfx.Addr()) {
				t.Fatalf("Parse(%q): %v refused although listed", s, pfx.Addr())
			}
			parts = append(parts, pfx.String())
		}
		q, err := config.ParseEgress(strings.Join(parts, ","))
		if err != nil || len(q.Allowlist()) != len(parts) {
			t.Fatalf("re-parse of %q: %v", parts, err)
		}
	})
}

func mustParse(t *testing.T, s string) *config.EgressPolicy {
	t.Helper()
	p, err := config.ParseEgress(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckURL(t *testing.T) {
	loop, err := config.ParseEgress("127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		url string
		pol *config.EgressPolicy
		ok  bool
	}{
		{"https://hooks.example.com/evs", nil, true},
		{"https://hooks.example.com:8443/evs?x=1", nil, true},
		{"http://hooks.example.com/evs", nil, false},
		{"http://127.0.0.1:9000/hook", nil, false},
		{"http://127.0.0.1:9000/hook", loop, true},
		{"http://localhost:9000/hook", loop, true},
		{"http://10.0.0.1/hook", loop, false},
		{"https://169.254.169.254/latest", nil, false},
		{"https://[::1]/x", nil, false},
		{"https://user:pw@hooks.example.com/", nil, false},
		{"https://user@hooks.example.com/", nil, false},
		{"ftp://hooks.example.com/", nil, false},
		{"/relative", nil, false},
		{"https://", nil, false},
		{"mailto:a@b.example", nil, false},
		{"https://hooks.example.com/" + strings.Repeat("a", 2048), nil, false},
		{"https://hooks.example.com/" + strings.Repeat("a", 2048-len("https://hooks.example.com/")), nil, true},
	} {
		if err := c.pol.CheckURL(c.url); (err == nil) != c.ok {
			t.Errorf("CheckURL(%.60q) = %v, want ok=%v", c.url, err, c.ok)
		}
	}
}
