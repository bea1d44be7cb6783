package config

import (
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestParseDNSServers(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"1.2.3.4", []string{"1.2.3.4:53"}, false},
		{"1.2.3.4:5353", []string{"1.2.3.4:5353"}, false},
		{" 10.0.0.2 , 1.1.1.1:53 ", []string{"10.0.0.2:53", "1.1.1.1:53"}, false},
		{"::1", []string{"[::1]:53"}, false},
		{"[::1]:5353", []string{"[::1]:5353"}, false},
		{"[2001:db8::1]", []string{"[2001:db8::1]:53"}, false},
		{"[1.2.3.4]", nil, true},
		{"2001:DB8::1", []string{"[2001:db8::1]:53"}, false},
		{"fe80::1%eth0", []string{"[fe80::1%eth0]:53"}, false},
		{"Resolver.Internal:53", []string{"resolver.internal:53"}, false},
		{"resolver.internal", []string{"resolver.internal:53"}, false},
		{"localhost:5300", []string{"localhost:5300"}, false},
		{"", nil, true},
		{"   ", nil, true},
		{",", nil, true},
		{"1.2.3.4,", nil, true},
		{"1.2.3.4,,5.6.7.8", nil, true},
		{"1.2.3.4:0", nil, true},
		{"1.2.3.4:65536", nil, true},
		{"1.2.3.4:-1", nil, true},
		{"1.2.3.4:+53", nil, true},
		{"1.2.3.4:053", nil, true},
		{"1.2.3.4:dns", nil, true},
		{"1.2.3.4:", nil, true},
		{"1.2.3", nil, true},
		{"256.1.1.1", nil, true},
		{"::1:5353:", nil, true},
		{"host name:53", nil, true},
		{"-bad.example", nil, true},
		{"bad_.example", nil, true},
		{"udp://1.2.3.4:53", nil, true},
		{"[1.2.3.4]:53", []string{"1.2.3.4:53"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseDNSServers(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseDNSServers(%q) error %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseDNSServers(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzParseDNSServers(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "1.2.3.4:53,[::1]:5353", "resolver.internal", "", ",", "[::1]", "fe80::1%eth0", "a:b:c", "1.2.3.4:99999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseDNSServers(s)
		if err != nil {
			if got != nil {
				t.Fatalf("error %v with result %q", err, got)
			}
			return
		}
		if len(got) == 0 || len(got) != strings.Count(s, ",")+1 {
			t.Fatalf("%q: %d servers for %d entries", s, len(got), strings.Count(s, ",")+1)
		}
		for _, srv := range got {
			host, port, err := net.SplitHostPort(srv)
			if err != nil || host == "" {
				t.Fatalf("%q: result %q is not host:port: %v", s, srv, err)
			}
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				t.Fatalf("%q: result %q has port %q", s, srv, port)
			}
		}
		// Normal form is a fixed point.
		again, err := ParseDNSServers(strings.Join(got, ","))
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("%q: reparsing %q gave %q, %v", s, got, again, err)
		}
	})
}
