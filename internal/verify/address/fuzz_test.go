package address

import (
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func FuzzParse(f *testing.F) {
	for _, row := range readCorpus(f) {
		f.Add(row.addr)
	}
	for _, s := range []string{
		"john.doe@example.com", "用户@例子.广告", "user@Bücher.example", `"a\"b"@example.com`,
		"user@xn--bcher-kva.example", "user@faß.de", "user@ｅｘａｍｐｌｅ.com", "a@1.2.3.4",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := Parse(s)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) || se.Rule == "" {
				t.Fatalf("Parse(%q) error %#v is not a *SyntaxError with a rule", s, err)
			}
			if a != (Address{}) {
				t.Fatalf("Parse(%q) returned %+v with its error", s, a)
			}
			return
		}
		norm := a.String()
		again, err := Parse(norm)
		if err != nil || again != a {
			t.Fatalf("Parse(%q) = %+v; Parse(%q) = %+v, %v: not idempotent", s, a, norm, again, err)
		}
		if len(a.Local) == 0 || len(a.Local) > maxLocal {
			t.Fatalf("Parse(%q): local part of %d octets", s, len(a.Local))
		}
		if len(a.Domain) == 0 || len(a.Domain) > maxDomain || len(norm) > maxPath {
			t.Fatalf("Parse(%q): domain of %d octets, address of %d", s, len(a.Domain), len(norm))
		}
		for _, label := range strings.Split(a.Domain, ".") {
			if label == "" || len(label) > maxLabel || label[0] == '-' || label[len(label)-1] == '-' {
				t.Fatalf("Parse(%q): bad domain label %q in %q", s, label, a.Domain)
			}
			for i := 0; i < len(label); i++ {
				if c := label[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
					t.Fatalf("Parse(%q): domain %q is not lower-case LDH", s, a.Domain)
				}
			}
		}
		if a.IDN != strings.Contains("."+a.Domain, ".xn--") {
			t.Fatalf("Parse(%q): IDN %v for domain %q", s, a.IDN, a.Domain)
		}
		if !utf8.ValidString(a.Local) || a.UTF8Local != (strings.IndexFunc(a.Local, func(r rune) bool { return r >= utf8.RuneSelf }) >= 0) {
			t.Fatalf("Parse(%q): UTF8Local %v for local part %q", s, a.UTF8Local, a.Local)
		}
		for _, r := range norm {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || invisible(r) || (r >= 0x80 && unicode.IsSpace(r)) {
				t.Fatalf("Parse(%q) accepted control, invisible or non-ASCII space %U", s, r)
			}
		}
		if !strings.Contains(s, a.Local) {
			t.Fatalf("Parse(%q): local part %q is not the one given", s, a.Local)
		}
		// Surrounding blanks never change the outcome.
		if b, err := Parse(" \t" + s + "\t "); err != nil || b != a {
			t.Fatalf("Parse with blanks around %q = %+v, %v; want %+v", s, b, err, a)
		}
	})
}
