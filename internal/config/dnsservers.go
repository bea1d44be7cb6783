package config

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// ParseDNSServers parses a comma-separated list of resolvers such as
// "10.0.0.2, 1.1.1.1:53, [::1]:5353, resolver.internal:53" into "host:port"
// entries. A missing port means 53. Empty lists, empty entries and anything
// that is neither an IP literal nor a host name are errors, so a typo in the
// configuration fails at start-up instead of as DNS errors on every address.
func ParseDNSServers(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("no DNS servers given")
	}
	parts := strings.Split(s, ",")
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		srv, err := parseServer(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("DNS server %d: %w", i+1, err)
		}
		out = append(out, srv)
	}
	return out, nil
}

// parseServer normalises one resolver address to "host:port".
func parseServer(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("empty entry")
	}
	// A bare IP, including IPv6 without brackets.
	if a, err := netip.ParseAddr(p); err == nil {
		return netip.AddrPortFrom(a, 53).String(), nil
	}
	// A bracketed IPv6 address without a port.
	if inner, ok := strings.CutPrefix(p, "["); ok && strings.HasSuffix(inner, "]") {
		if a, err := netip.ParseAddr(strings.TrimSuffix(inner, "]")); err == nil && a.Is6() {
			return netip.AddrPortFrom(a, 53).String(), nil
		}
	}
	host, port := p, "53"
	if h, pt, err := net.SplitHostPort(p); err == nil {
		host, port = h, pt
	} else if strings.ContainsAny(p, ":[]") {
		return "", fmt.Errorf("%q is not host:port", p)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 || port[0] == '0' && len(port) > 1 || port[0] == '+' {
		return "", fmt.Errorf("%q has no valid port", p)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(a, uint16(n)).String(), nil
	}
	if !isHostName(host) {
		return "", fmt.Errorf("%q is neither an IP address nor a host name", p)
	}
	return net.JoinHostPort(strings.ToLower(strings.TrimSuffix(host, ".")), strconv.FormatUint(n, 10)), nil
}

// ldh is the letters, digits and hyphen of a host name's labels.
const ldh = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-"

// isHostName accepts LDH host names (RFC 1123), with an optional trailing dot.
func isHostName(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	labels := strings.Split(h, ".")
	// An all-digit last label is a mistyped IPv4 address, not a name.
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return false
	}
	for _, label := range labels {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' || strings.Trim(label, ldh) != "" {
			return false
		}
	}
	return true
}
