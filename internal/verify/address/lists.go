// The engine's reference lists (disposable and free domains, role local
// parts) are embedded text files parsed into maps on first use, so programs
// that never ask pay nothing and lookups do not allocate. TestRefresh
// rewrites the disposable and free lists; data/SOURCES.md says from what.

package address

import (
	_ "embed"
	"strings"
	"sync"
)

var (
	//go:embed data/disposable.txt
	disposableData string
	//go:embed data/free.txt
	freeData string
	//go:embed data/role.txt
	roleData string
)

// set is a domain or name list; the keys are substrings of the embedded
// data, so building it copies no strings.
type set map[string]struct{}

// parse reads the data file format: one entry a line, '#' starts a comment,
// surrounding blanks ignored.
func parse(data string) set {
	s := make(set, strings.Count(data, "\n"))
	for line := range strings.SplitSeq(data, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" {
			s[line] = struct{}{}
		}
	}
	return s
}

var (
	disposable = sync.OnceValue(func() set { return parse(disposableData) })
	free       = sync.OnceValue(func() set { return parse(freeData) })
	role       = sync.OnceValue(func() set { return parse(roleData) })
	// disposableTLD reports a dotless entry on the disposable list. There
	// is none today, so Disposable can skip looking up the last label of
	// every domain in a map of over 100,000 entries.
	disposableTLD = sync.OnceValue(func() bool {
		for d := range disposable() {
			if !strings.Contains(d, ".") {
				return true
			}
		}
		return false
	})
)

// Disposable reports whether domain belongs to a disposable-address service.
// domain must be lower-case ASCII (A-labels); a subdomain of a listed domain
// counts too, since these services hand out addresses under any subdomain
// (x.mailinator.com).
func Disposable(domain string) bool {
	s, tld := disposable(), disposableTLD()
	for {
		i := strings.IndexByte(domain, '.')
		if i < 0 && !tld {
			return false
		}
		if _, ok := s[domain]; ok {
			return true
		}
		if i < 0 {
			return false
		}
		domain = domain[i+1:]
	}
}

// Free reports whether domain is a free mailbox provider (gmail.com,
// gmx.de ...). domain must be lower-case ASCII (A-labels). Only the exact
// domain matches: a subdomain of a provider is somebody's own mail domain,
// and a disposable service is reported by Disposable, never by Free.
func Free(domain string) bool {
	_, ok := free()[domain]
	return ok
}

// Role reports whether local is a role mailbox (postmaster, info, noreply
// ...) that reaches a function or a team rather than one person. It ignores
// ASCII case and a "+tag" suffix ("Info+news" is a role).
func Role(local string) bool {
	if i := strings.IndexByte(local, '+'); i >= 0 {
		local = local[:i]
	}
	if local == "" || len(local) > maxLocal {
		return false
	}
	var buf [maxLocal]byte
	for i := 0; i < len(local); i++ {
		c := local[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	// The compiler turns a map index by string(bytes) into a lookup
	// without allocating.
	_, ok := role()[string(buf[:len(local)])]
	return ok
}
