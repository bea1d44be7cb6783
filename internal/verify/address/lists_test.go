package address

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDisposable(t *testing.T) {
	tests := []struct {
		domain string
		want   bool
	}{
		{"mailinator.com", true},
		{"guerrillamail.com", true},
		{"yopmail.com", true},
		{"10minutemail.com", true},
		{"x.mailinator.com", true},             // subdomain of a listed domain
		{"a.b.mailinator.com", true},           // deeper subdomain
		{"mailinator.com.evil.example", false}, // listed name as a prefix is not a parent
		{"zzmailinator.com", false},            // suffix without the dot boundary
		{"com", false},
		{"gmail.com", false},
		{"good.example", false},
		{"", false},
		{".", false},
		{"mailinator.com.", false}, // callers pass names without the root dot
	}
	for _, tt := range tests {
		if got := Disposable(tt.domain); got != tt.want {
			t.Errorf("Disposable(%q) = %v, want %v", tt.domain, got, tt.want)
		}
	}
}

func TestFree(t *testing.T) {
	tests := []struct {
		domain string
		want   bool
	}{
		{"gmail.com", true},
		{"yahoo.com", true},
		{"outlook.com", true},
		{"hotmail.com", true},
		{"gmx.de", true},
		{"mail.ru", true},
		{"yandex.ru", true},
		{"qq.com", true},
		{"163.com", true},
		{"icloud.com", true},
		{"proton.me", true},
		{"tutanota.com", true},    // only in wellknown.txt, so this checks the merge
		{"mail.gmail.com", false}, // subdomains are somebody's own domain
		{"Gmail.com", false},      // callers normalise case first
		{"mailinator.com", false}, // disposable, reported by Disposable instead
		{"good.example", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := Free(tt.domain); got != tt.want {
			t.Errorf("Free(%q) = %v, want %v", tt.domain, got, tt.want)
		}
	}
}

func TestRole(t *testing.T) {
	tests := []struct {
		local string
		want  bool
	}{
		{"admin", true},
		{"info", true},
		{"postmaster", true},
		{"abuse", true},
		{"support", true},
		{"sales", true},
		{"noreply", true},
		{"no-reply", true},
		{"webmaster", true},
		{"hostmaster", true},
		{"billing", true},
		{"contact", true},
		{"hello", true},
		{"team", true},
		{"INFO", true},
		{"PostMaster", true},
		{"info+x", true},
		{"Sales+Q3+extra", true},
		{"alice", false},
		{"info.alice", false},
		{"alice+info", false}, // the tag is not the mailbox
		{"+info", false},
		{"", false},
		{"infó", false},
		{strings.Repeat("a", 65), false},
		{strings.Repeat("a", 64), false},
	}
	for _, tt := range tests {
		if got := Role(tt.local); got != tt.want {
			t.Errorf("Role(%q) = %v, want %v", tt.local, got, tt.want)
		}
	}
}

// TestWellKnownNeverDisposable guards the promise that a real gmail (or
// other big-provider) address is never flagged disposable, whatever the
// upstream list contains.
func TestWellKnownNeverDisposable(t *testing.T) {
	wk := readFile(t, "wellknown.txt")
	if len(wk) < 50 {
		t.Fatalf("wellknown.txt has %d entries; the file looks truncated", len(wk))
	}
	for _, d := range wk {
		if Disposable(d) {
			t.Errorf("well-known provider %s is flagged disposable", d)
		}
		if !Free(d) {
			t.Errorf("well-known provider %s is not flagged free", d)
		}
	}
}

// TestFreeAndDisposableDisjoint checks the generator's promise that a
// domain carries at most one of the two flags.
func TestFreeAndDisposableDisjoint(t *testing.T) {
	for d := range free() {
		if Disposable(d) {
			t.Errorf("%s is both free and disposable", d)
		}
	}
}

// TestDataHygiene checks what the generator promises and a hand edit could
// break: sorted, lower case, no duplicates, valid host names.
func TestDataHygiene(t *testing.T) {
	min := map[string]int{"disposable.txt": 50000, "free.txt": 5000, "wellknown.txt": 50, "role.txt": 30}
	for name, least := range min {
		t.Run(name, func(t *testing.T) {
			entries := readFile(t, name)
			if len(entries) < least {
				t.Fatalf("%d entries, want at least %d", len(entries), least)
			}
			for i, e := range entries {
				if i > 0 && entries[i-1] >= e {
					t.Errorf("line order: %q then %q (unsorted or duplicate)", entries[i-1], e)
				}
				if name == "role.txt" {
					if !validRoleName(e) {
						t.Errorf("%q is not a lower-case local part", e)
					}
					continue
				}
				if !validHost(e) {
					t.Errorf("%q is not a lower-case host name with two or more labels", e)
				}
			}
		})
	}
}

// TestEmbeddedMatchesFiles makes sure the maps hold what the files on disk
// say, so the hygiene test above speaks for the embedded data.
func TestEmbeddedMatchesFiles(t *testing.T) {
	for name, s := range map[string]set{"disposable.txt": disposable(), "free.txt": free(), "role.txt": role()} {
		entries := readFile(t, name)
		if len(entries) != len(s) {
			t.Errorf("%s: %d lines on disk, %d embedded", name, len(entries), len(s))
		}
		for _, e := range entries {
			if _, ok := s[e]; !ok {
				t.Errorf("%s: %q on disk but not embedded", name, e)
			}
		}
	}
}

func readFile(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("data", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if line != strings.TrimSpace(line) || line == "" {
			t.Errorf("%s: line %q has stray blanks or is empty", name, line)
			continue
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// ValidHost is validHost for the external tests (refresh_test.go), which
// hold a refresh to the same rule.
var ValidHost = validHost

// validHost reports whether h is a lower-case LDH host name with at least
// two labels and a top-level label that is not all digits (so not an IPv4
// address).
func validHost(h string) bool {
	if len(h) > 253 || !strings.Contains(h, ".") {
		return false
	}
	if strings.Trim(h[strings.LastIndexByte(h, '.')+1:], "0123456789") == "" {
		return false
	}
	for _, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range []byte(l) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

func validRoleName(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return s != "" && len(s) <= maxLocal
}

func BenchmarkDisposable(b *testing.B) {
	Load()
	for _, d := range []string{"gmail.com", "x.y.mailinator.com", "mail.corp.good.example"} {
		b.Run(d, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Disposable(d)
			}
		})
	}
}

func BenchmarkFree(b *testing.B) {
	Load()
	b.ReportAllocs()
	for b.Loop() {
		Free("gmail.com")
	}
}

func BenchmarkRole(b *testing.B) {
	Load()
	b.ReportAllocs()
	for b.Loop() {
		Role("Info+newsletter")
	}
}

// BenchmarkLoad measures the one-off parse a cold start pays.
func BenchmarkLoad(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		parse(disposableData)
		parse(freeData)
	}
}

// Load parses all lists now instead of on first use. Call it during start-up
// (a Lambda init phase, say) to keep the parse off the first request.
func Load() {
	disposable()
	disposableTLD()
	free()
	role()
}
