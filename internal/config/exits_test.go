package config_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/config"
)

// TestSMTPExits: EVS_SMTP_PROXY takes one URL (the form of old) or a
// comma-separated list, each with an optional #egress-ip; a wrong list is
// refused naming the exit, never quoting a password.
func TestSMTPExits(t *testing.T) {
	type exit struct{ url, name, ip string }
	cases := []struct {
		name, proxy, egressIP string
		want                  []exit
		egress                string // EgressName
		err                   string // part of the error; "" is none
	}{
		{name: "one, of old", proxy: "socks5://evs:s3cret@10.0.0.1:1080",
			want: []exit{{"socks5://evs:s3cret@10.0.0.1:1080", "10.0.0.1", ""}}, egress: "10.0.0.1"},
		{name: "one with EVS_SMTP_EGRESS_IP", proxy: "socks5://10.0.0.1:1080", egressIP: "192.0.2.7",
			want: []exit{{"socks5://10.0.0.1:1080", "10.0.0.1", "192.0.2.7"}}, egress: "10.0.0.1"},
		{name: "one with its #ip", proxy: "socks5://10.0.0.1:1080#192.0.2.7",
			want: []exit{{"socks5://10.0.0.1:1080", "10.0.0.1", "192.0.2.7"}}, egress: "10.0.0.1"},
		{name: "one, #ip and the same EVS_SMTP_EGRESS_IP", proxy: "socks5://10.0.0.1:1080#192.0.2.7", egressIP: "192.0.2.7",
			want: []exit{{"socks5://10.0.0.1:1080", "10.0.0.1", "192.0.2.7"}}, egress: "10.0.0.1"},
		{name: "two with their addresses", proxy: " socks5://evs:s3cret@exit-a.example:1080#192.0.2.7 , socks5://exit-b.example:1080#2001:db8::7",
			want: []exit{{"socks5://evs:s3cret@exit-a.example:1080", "exit-a.example", "192.0.2.7"},
				{"socks5://exit-b.example:1080", "exit-b.example", "2001:db8::7"}},
			egress: "exit-a.example+exit-b.example"},
		{name: "two ports of one host", proxy: "socks5://10.0.0.1:1080,socks5://10.0.0.1:1081,socks5://[2001:db8::1]:1080",
			want: []exit{{"socks5://10.0.0.1:1080", "10.0.0.1:1080", ""}, {"socks5://10.0.0.1:1081", "10.0.0.1:1081", ""},
				{"socks5://[2001:db8::1]:1080", "2001:db8::1", ""}},
			egress: "10.0.0.1:1080+10.0.0.1:1081+2001:db8::1"},
		{name: "a percent-encoded comma in a password", proxy: "socks5://evs:s3%2Ccret@10.0.0.1:1080,socks5://10.0.0.2:1080",
			want:   []exit{{"socks5://evs:s3%2Ccret@10.0.0.1:1080", "10.0.0.1", ""}, {"socks5://10.0.0.2:1080", "10.0.0.2", ""}},
			egress: "10.0.0.1+10.0.0.2"},

		{name: "http", proxy: "http://evs:s3cret@10.0.0.1:3128", err: "scheme is not socks5"},
		{name: "no port", proxy: "socks5://evs:s3cret@10.0.0.1", err: "host and a port"},
		{name: "port out of range", proxy: "socks5://evs:s3cret@10.0.0.1:70000", err: "host and a port"},
		{name: "a path", proxy: "socks5://evs:s3cret@10.0.0.1:1080/x", err: "no path"},
		{name: "an empty entry", proxy: "socks5://evs:s3cret@10.0.0.1:1080,,socks5://10.0.0.2:1080", err: "exit 2 of 3 is empty"},
		{name: "the second is wrong", proxy: "socks5://evs:s3cret@10.0.0.1:1080,socks5://evs:s3cret@:1080", err: "exit 2 of 2"},
		{name: "twice the same", proxy: "socks5://evs:s3cret@10.0.0.1:1080,socks5://10.0.0.1:1080", err: "listed twice"},
		{name: "a bad #ip", proxy: "socks5://evs:s3cret@10.0.0.1:1080#exit-a", err: "#exit-a is not an IP address"},
		{name: "an unencoded comma in a password", proxy: "socks5://evs:s3,cret@10.0.0.1:1080", err: "exit 1 of 2"},
		{name: "EVS_SMTP_EGRESS_IP with two", proxy: "socks5://evs:s3cret@10.0.0.1:1080,socks5://10.0.0.2:1080", egressIP: "192.0.2.7",
			err: "give each its own"},
		{name: "#ip and EVS_SMTP_EGRESS_IP differ", proxy: "socks5://evs:s3cret@10.0.0.1:1080#192.0.2.8", egressIP: "192.0.2.7", err: "differ"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := config.FromEnv(env(map[string]string{"EVS_SMTP_PROXY": c.proxy, "EVS_SMTP_EGRESS_IP": c.egressIP, "EVS_SMTP_HELO": "h.example"}), false)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "EVS_SMTP_PROXY") {
					t.Fatalf("error %v, want one naming EVS_SMTP_PROXY and saying %q", err, c.err)
				}
				if strings.Contains(err.Error(), "s3") || strings.Contains(err.Error(), "evs:") {
					t.Fatalf("the error %q quotes credentials", err)
				}
				// The secret's value is read the same way.
				var sc config.Config
				sc.EgressIP = cfg.EgressIP
				if err := sc.SetSMTPProxy(c.proxy); err == nil || strings.Contains(err.Error(), "s3") || sc.SMTPProxy != "" || sc.SMTPExits != nil {
					t.Fatalf("SetSMTPProxy: %v (exits %v)", err, sc.SMTPExits)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.SMTPExits) != len(c.want) {
				t.Fatalf("%d exits, want %d", len(cfg.SMTPExits), len(c.want))
			}
			for i, w := range c.want {
				g := cfg.SMTPExits[i]
				var ip netip.Addr
				if w.ip != "" {
					ip = netip.MustParseAddr(w.ip)
				}
				if g.URL != w.url || g.Name != w.name || g.EgressIP != ip {
					t.Errorf("exit %d: %q %q %v, want %q %q %v", i, g.URL, g.Name, g.EgressIP, w.url, w.name, ip)
				}
			}
			if got := cfg.EgressName(); got != c.egress || cfg.SMTP != config.SMTPProxy {
				t.Errorf("egress name %q (SMTP %s), want %q", got, cfg.SMTP, c.egress)
			}
			var sc config.Config
			if err := sc.SetSMTPProxy(c.proxy); err != nil && c.egressIP == "" {
				t.Errorf("SetSMTPProxy: %v", err)
			}
		})
	}
}
