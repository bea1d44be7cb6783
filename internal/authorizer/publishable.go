package authorizer

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/evs-dev/evs/internal/evs"
)

// PublishableMethod and PublishableRoute are the one call a publishable key
// may make: verify one address from a web page.
const (
	PublishableMethod = http.MethodPost
	PublishableRoute  = "/v1/verify"
)

// Permit is the rule of publishable keys both deployments apply: one may
// call only POST /v1/verify, with an Origin header naming one of its
// origins; a secret key is not restricted here. route is the route's
// template, origin the Origin header ("" for none). A refusal is a
// CodeForbidden error naming the rule, never the key.
func Permit(p evs.Principal, method, route, origin string) error {
	if p.Kind != evs.KeyPublishable {
		return nil
	}
	if method != PublishableMethod || route != PublishableRoute {
		return evs.Errorf(evs.CodeForbidden, "A publishable key may call only POST /v1/verify.")
	}
	if !OriginAllowed(p.Origins, origin) {
		return evs.Errorf(evs.CodeForbidden, "A publishable key is accepted only from its listed origins: this request's Origin is missing or not one of them.")
	}
	return nil
}

// OriginAllowed tells whether the Origin header origin names one of
// origins (as CheckOrigins keeps them). A browser sends its origin in that
// same canonical form; anything else ("null", a path) is refused.
func OriginAllowed(origins []string, origin string) bool {
	if origin == "" {
		return false
	}
	c, err := CanonicalOrigin(origin)
	return err == nil && c == origin && slices.Contains(origins, c)
}

// CheckOrigins returns origins in canonical form (CanonicalOrigin), without
// duplicates; none, or one that is not an origin, is a CodeInvalidRequest
// error naming it.
func CheckOrigins(origins []string) ([]string, error) {
	if len(origins) == 0 {
		return nil, evs.Errorf(evs.CodeInvalidRequest, "a publishable key needs at least one origin (scheme://host[:port])")
	}
	out := make([]string, 0, len(origins))
	for _, o := range origins {
		c, err := CanonicalOrigin(o)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// CanonicalOrigin returns the web origin s names as a browser writes it in
// the Origin header: lower-case scheme and host, no default port, no path.
// The scheme is https, or http for a loopback host (localhost, 127.0.0.0/8,
// ::1) only, so a key is never bound to a page anyone on the path could
// change.
func CanonicalOrigin(s string) (string, error) {
	bad := func(why string) (string, error) {
		return "", evs.Errorf(evs.CodeInvalidRequest, "origin %q: %s", s, why)
	}
	u, err := url.Parse(s)
	if err != nil || u.Opaque != "" || u.Host == "" {
		return bad("not scheme://host[:port]")
	}
	if u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return bad("an origin has no user, path, query or fragment")
	}
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if host == "" || strings.ContainsAny(host, "*%") {
		return bad("no host, or a wildcard")
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return bad("the port must be 1 to 65535")
		}
	}
	switch {
	case scheme != "https" && scheme != "http":
		return bad("the scheme must be https (or http for localhost)")
	case scheme == "http" && !loopback(host):
		return bad("http is allowed only for localhost and loopback addresses; use https")
	case scheme == "https" && port == "443", scheme == "http" && port == "80":
		port = "" // the default, which a browser leaves out
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return scheme + "://" + host, nil
}

// loopback tells whether host names this machine.
func loopback(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}
