package address

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSuggest(t *testing.T) {
	tests := []struct {
		in, want string // want "" means no suggestion
		why      string
	}{
		// Misspelt labels.
		{"gmial.com", "gmail.com", "transposition"},
		{"gmal.com", "gmail.com", "deletion"},
		{"gmaill.com", "gmail.com", "insertion"},
		{"gnail.com", "gmail.com", "substitution"},
		{"mgail.com", "gmail.com", "first two letters swapped"},
		{"hotmial.com", "hotmail.com", "transposition"},
		{"hotmal.com", "hotmail.com", "deletion"},
		{"yaho.com", "yahoo.com", "deletion"},
		{"yahooo.com", "yahoo.com", "insertion"},
		{"outlok.com", "outlook.com", "deletion"},
		{"iclod.com", "icloud.com", "deletion"},
		{"protonmial.com", "protonmail.com", "transposition"},
		{"gooogelmail.com", "googlemail.com", "two edits on a long label"},
		{"hotmial.co.uk", "hotmail.co.uk", "multi-label suffix"},
		// Misspelt suffixes.
		{"gmail.co", "gmail.com", "dropped letter, real suffix, long label"},
		{"gmail.con", "gmail.com", "suffix that cannot exist"},
		{"gmail.cmo", "gmail.com", "transposed suffix"},
		{"gmail.comm", "gmail.com", "extra letter"},
		{"hotmail.cm", "hotmail.com", "dropped letter"},
		{"aol.con", "aol.com", "short label, but .con cannot exist"},
		{"gmx.nte", "gmx.net", "short label, suffix cannot exist"},
		// Both at once.
		{"gmial.con", "gmail.com", "both, suffix cannot exist"},
		{"gmial.co", "", "both, but .co is real"},
		// Real domains and near misses that must stay.
		{"gmail.com", "", "itself known"},
		{"gmx.de", "", "itself known"},
		{"gmx.net", "", "itself known"},
		{"gmx.com", "", "itself known"},
		{"mail.com", "", "itself known"},
		{"aol.com", "", "itself known"},
		{"ymail.com", "", "known, though one edit from gmail.com"},
		{"y7mail.com", "", "Yahoo's own, listed free"},
		{"email.com", "", "listed free"},
		{"hotmail.be", "", "regional domain, listed free"},
		{"mailinator.com", "", "disposable"},
		{"gmai.com", "gmail.com", "a disposable typo-squat still gets its correction"},
		{"ao.com", "", "short label: too many real neighbours"},
		{"gmz.com", "", "short label"},
		{"aol.co", "", "short label with a real suffix"},
		{"mail.co", "", "short label with a real suffix"},
		{"live.co", "", "short label with a real suffix"},
		{"cloud.com", "", "first letter differs"},
		{"fmail.com", "", "first letter differs"},
		{"oracle.fr", "", "two edits from orange.fr, too short for two"},
		{"liberty.it", "", "two edits from libero.it"},
		{"yankee.com", "", "two edits from yandex.com"},
		{"hotmail.fe", "", "ties hotmail.de and hotmail.fr"},
		{"never.com", "", "naver.com is not a target: too close to words"},
		{"tv-online.de", "", "t-online.de is not a target"},
		{"outlook.ie", "", "real suffix swapped for another"},
		{"gmail.net", "", "suffix too far"},
		{"gmail.c", "", "two edits in the suffix"},
		{"mail.gmial.com", "", "subdomains are left alone"},
		{"good.example", "", "nowhere near"},
		{"com", "", "no label"},
		{".com", "", "empty label"},
		{"gmail.", "", "empty suffix"},
		{"", "", "empty"},
		{"xn--gmil-6na.com", "", "A-label"},
	}
	for _, tt := range tests {
		got, ok := Suggest(tt.in)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("Suggest(%q) = %q, %v; want %q (%s)", tt.in, got, ok, tt.want, tt.why)
		}
	}
}

func TestSuggestTypoMaxEdits(t *testing.T) {
	tests := []struct {
		in       string
		maxEdits int
		want     string
	}{
		{"gmial.com", 1, "gmail.com"},
		{"gmial.com", 0, ""},
		{"gmial.con", 1, ""},
		{"gmial.con", 2, "gmail.com"},
		{"gooogelmail.com", 1, ""},
		{"gooogelmail.com", 2, "googlemail.com"},
		{"gmail.com", 3, ""}, // known domains are never corrected
	}
	for _, tt := range tests {
		got, ok := SuggestTypo(tt.in, tt.maxEdits)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("SuggestTypo(%q, %d) = %q, %v; want %q", tt.in, tt.maxEdits, got, ok, tt.want)
		}
	}
}

func TestDistance(t *testing.T) {
	tests := []struct {
		a, b string
		max  int
		want int
	}{
		{"", "", 2, 0},
		{"gmail", "gmail", 2, 0},
		{"gmail", "gmial", 2, 1},  // transposition is one edit
		{"gmail", "gmal", 2, 1},   // deletion
		{"gmail", "gmaill", 2, 1}, // insertion
		{"gmail", "gnail", 2, 1},  // substitution
		{"ca", "abc", 5, 3},       // optimal string alignment, not full Damerau
		{"orange", "oracle", 5, 2},
		{"kitten", "sitting", 5, 3},
		{"kitten", "sitting", 2, 3}, // capped at max+1
		{"a", "abcdef", 2, 3},       // length gap alone exceeds max
		{"", "abc", 5, 3},
		{strings.Repeat("a", maxLen), strings.Repeat("a", maxLen-1), 3, 4}, // too long to compare
	}
	for _, tt := range tests {
		if got := distance(tt.a, tt.b, tt.max); got != tt.want {
			t.Errorf("distance(%q, %q, %d) = %d, want %d", tt.a, tt.b, tt.max, got, tt.want)
		}
		if got := distance(tt.b, tt.a, tt.max); got != tt.want {
			t.Errorf("distance(%q, %q, %d) = %d, want %d (symmetry)", tt.b, tt.a, tt.max, got, tt.want)
		}
	}
}

// TestKnownAreFree ties the suggestion targets to the lists: a suggestion
// must name a real free provider, never a disposable one.
func TestKnownAreFree(t *testing.T) {
	for _, d := range known {
		if !Free(d) || Disposable(d) {
			t.Errorf("%s: Free=%v Disposable=%v; a suggestion target must be free and not disposable", d, Free(d), Disposable(d))
		}
		if _, ok := SuggestTypo(d, 3); ok {
			t.Errorf("SuggestTypo(%q) corrects a known domain", d)
		}
	}
	if !slices.IsSorted(known) {
		t.Error("known is not sorted")
	}
}

// TestFreeListHasNoOneEditTypos fails when the matcher changed without the
// lists being regenerated: a one-edit typo-squat left in the free list
// would silently suppress its own correction.
func TestFreeListHasNoOneEditTypos(t *testing.T) {
	f, err := os.Open(filepath.Join("data", "free.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		d := sc.Text()
		if d == "" || strings.HasPrefix(d, "#") {
			continue
		}
		n++
		if s, ok := SuggestTypo(d, 1); ok {
			t.Errorf("free list holds %s, which SuggestTypo corrects to %s; regenerate the lists (internal/verify/address/data/SOURCES.md)", d, s)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 5000 {
		t.Fatalf("read %d free domains; the file looks truncated", n)
	}
}

func FuzzSuggest(f *testing.F) {
	for _, s := range []string{"gmial.com", "gmail.con", "gmail.com", "ao.com", "hotmial.co.uk", "", ".", "a.b.c", "xn--gmil-6na.com", "gmail.co\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, d string) {
		got, ok := Suggest(d)
		if !ok {
			if got != "" {
				t.Fatalf("Suggest(%q) = %q with ok=false", d, got)
			}
			return
		}
		if got == d {
			t.Fatalf("Suggest(%q) suggests the input itself", d)
		}
		if !slices.Contains(known, got) {
			t.Fatalf("Suggest(%q) = %q, not a known domain", d, got)
		}
		if Free(d) {
			t.Fatalf("Suggest(%q) corrects a free provider's domain", d)
		}
	})
}

func BenchmarkSuggest(b *testing.B) {
	Load()
	for _, d := range []string{"gmail.com", "gmial.com", "gmail.con", "corp.example.org", "subdomain.of.some.company.example"} {
		b.Run(d, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Suggest(d)
			}
		})
	}
}
