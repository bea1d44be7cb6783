package config

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// SMTPExit is one SOCKS5 exit of EVS_SMTP_PROXY (docs/aws.md, "SOCKS
// exits"). The variable, or the value of the secret EVS_SMTP_PROXY_SECRET
// names, is a comma-separated list of
//
//	socks5://[user:pass@]host:port[#egress-ip]
//
// where the optional #egress-ip is the public address that exit's
// connections leave from, for its self-check (for a single exit,
// EVS_SMTP_EGRESS_IP too). A comma or # in credentials is percent-encoded.
type SMTPExit struct {
	// URL is socks5://[user:pass@]host:port, without the #egress-ip. It
	// may hold a password: never log it.
	URL string
	// Name labels the exit in metrics, /readyz and politeness keys: its
	// host, or host:port when another exit has the same host. It never
	// holds credentials.
	Name string
	// EgressIP is the exit's #egress-ip (or EVS_SMTP_EGRESS_IP for a
	// single exit); the zero Addr when not known.
	EgressIP netip.Addr
}

// ParseSMTPExits reads a list of SOCKS5 exits (see SMTPExit). Its errors
// say which exit is wrong and how, and never quote a URL, which may hold
// a password.
func ParseSMTPExits(s string) ([]SMTPExit, error) {
	var out []SMTPExit
	parts := strings.Split(s, ",")
	seen := map[string]bool{}
	for i, p := range parts {
		p = strings.TrimSpace(p)
		where := "the exit"
		if len(parts) > 1 {
			where = fmt.Sprintf("exit %d of %d", i+1, len(parts))
		}
		if p == "" {
			return nil, fmt.Errorf("%s is empty", where)
		}
		e, err := parseExit(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if seen[e.Name] {
			return nil, fmt.Errorf("%s: %s is listed twice", where, e.Name)
		}
		seen[e.Name] = true
		out = append(out, e)
	}
	// Names are hosts, unless two exits share one (two ports of one
	// machine): then host:port tells them apart.
	hosts := map[string]int{}
	for _, e := range out {
		h, _, _ := strings.Cut(e.Name, "|")
		hosts[h]++
	}
	for i, e := range out {
		host, hostPort, _ := strings.Cut(e.Name, "|")
		out[i].Name = host
		if hosts[host] > 1 {
			out[i].Name = hostPort
		}
	}
	return out, nil
}

// parseExit reads one exit; its Name is "host|host:port" until
// ParseSMTPExits picks one.
func parseExit(s string) (SMTPExit, error) {
	const form = "must be socks5://[user:pass@]host:port[#egress-ip]"
	u, err := url.Parse(s)
	if err != nil {
		return SMTPExit{}, errors.New(form)
	}
	if u.Scheme != "socks5" {
		return SMTPExit{}, fmt.Errorf("%s (the scheme is not socks5)", form)
	}
	port, perr := strconv.Atoi(u.Port())
	if u.Hostname() == "" || perr != nil || port < 1 || port > 65535 {
		return SMTPExit{}, fmt.Errorf("%s (a host and a port are needed)", form)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Opaque != "" {
		return SMTPExit{}, fmt.Errorf("%s (no path or query)", form)
	}
	e := SMTPExit{Name: u.Hostname() + "|" + u.Host}
	if u.Fragment != "" {
		ip, err := netip.ParseAddr(u.Fragment)
		if err != nil || ip.Zone() != "" {
			// The fragment is an address, never a credential: quoting it
			// helps and leaks nothing.
			return SMTPExit{}, fmt.Errorf("#%s is not an IP address", u.Fragment)
		}
		e.EgressIP = ip.Unmap()
	}
	// The text before '#' as given: a raw '#' can only start the fragment.
	e.URL, _, _ = strings.Cut(s, "#")
	return e, nil
}

// setExits parses proxy into c.SMTPExits and joins EVS_SMTP_EGRESS_IP
// (c.EgressIP, already read) to them: it names a single exit's address;
// with several, each exit says its own.
func (c *Config) setExits(proxy string) error {
	exits, err := ParseSMTPExits(proxy)
	if err != nil {
		return err
	}
	if len(exits) == 1 {
		switch e := &exits[0]; {
		case !e.EgressIP.IsValid():
			e.EgressIP = c.EgressIP
		case c.EgressIP.IsValid() && c.EgressIP != e.EgressIP:
			return errors.New("the exit's #egress-ip and EVS_SMTP_EGRESS_IP differ")
		default:
			c.EgressIP = e.EgressIP
		}
	} else if c.EgressIP.IsValid() {
		return errors.New("EVS_SMTP_EGRESS_IP names one address, and there are several exits: give each its own as socks5://host:port#egress-ip")
	}
	c.SMTPExits = exits
	return nil
}
