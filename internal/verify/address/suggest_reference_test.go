package address

import (
	"bufio"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/net/publicsuffix"
)

// typoReference is Typo as it was before the first-letter index: every
// target measured, in order, with int rows. It is kept, unoptimised, as the
// specification the fast matcher is checked against.
func typoReference(d string, maxEdits int) (string, bool) {
	label, rest, ok := strings.Cut(d, ".")
	if !ok || label == "" || rest == "" {
		return "", false
	}
	// Computed lazily: most inputs are not near any provider at all.
	realSuffix := -1
	isReal := func() bool {
		if realSuffix < 0 {
			realSuffix = 0
			if _, icann := publicsuffix.PublicSuffix(rest); icann {
				realSuffix = 1
			}
		}
		return realSuffix == 1
	}

	best, bestScore, tie := "", 0, false
	for i := range targets {
		t := &targets[i]
		if t.domain == d {
			return "", false
		}
		rd := referenceDistance(rest, t.rest, 1)
		if rd > 1 {
			continue
		}
		ld := 0
		if label != t.label {
			max := maxLabelEdits(t.label)
			if max == 0 || !sameStart(label, t.label) {
				continue
			}
			if ld = referenceDistance(label, t.label, max); ld > max {
				continue
			}
		}
		if rd == 1 && isReal() && (ld > 0 || len(t.label) < minEditLabel || len(rest) != len(t.rest)-1) {
			continue
		}
		score := ld + rd
		if score > maxEdits {
			continue
		}
		switch {
		case best == "" || score < bestScore:
			best, bestScore, tie = t.domain, score, false
		case score == bestScore:
			tie = true
		}
	}
	if best == "" || tie {
		return "", false
	}
	return best, true
}

// referenceDistance is distance as it was, with int cells.
func referenceDistance(a, b string, max int) int {
	if a == b {
		return 0
	}
	if d := len(a) - len(b); d > max || -d > max || len(a) >= maxLen || len(b) >= maxLen {
		return max + 1
	}
	var rows [3][maxLen + 1]int
	prev2, prev, cur := &rows[0], &rows[1], &rows[2]
	for j := 0; j <= len(b); j++ {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			v := min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				v = min(v, prev2[j-2]+1)
			}
			cur[j] = v
			rowMin = min(rowMin, v)
		}
		if rowMin > max {
			return max + 1
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return min(prev[len(b)], max+1)
}

// differentialDomains returns inputs near and far from the providers:
// every known domain, every one-edit neighbour of each (deletions,
// transpositions, substitutions and insertions over the domain alphabet),
// seeded two- and three-edit neighbours, and the whole free list.
func differentialDomains(tb testing.TB) []string {
	tb.Helper()
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-."
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	oneEdit := func(d string, f func(string)) {
		for i := 0; i <= len(d); i++ {
			if i < len(d) {
				f(d[:i] + d[i+1:])
				if i+1 < len(d) {
					f(d[:i] + string(d[i+1]) + string(d[i]) + d[i+2:])
				}
			}
			for _, c := range []byte(alphabet) {
				if i < len(d) {
					f(d[:i] + string(c) + d[i+1:])
				}
				f(d[:i] + string(c) + d[i:])
			}
		}
	}
	for _, d := range known {
		add(d)
		oneEdit(d, add)
	}
	r := rand.New(rand.NewPCG(13, 2))
	mutate := func(d string) string {
		if d == "" {
			return string(alphabet[r.IntN(len(alphabet))])
		}
		i := r.IntN(len(d))
		c := string(alphabet[r.IntN(len(alphabet))])
		switch r.IntN(4) {
		case 0:
			return d[:i] + d[i+1:]
		case 1:
			return d[:i] + c + d[i+1:]
		case 2:
			return d[:i] + c + d[i:]
		default:
			if i+1 < len(d) {
				return d[:i] + string(d[i+1]) + string(d[i]) + d[i+2:]
			}
			return d + c
		}
	}
	for range 20000 {
		d := known[r.IntN(len(known))]
		for range 2 + r.IntN(2) {
			d = mutate(d)
		}
		add(d)
	}
	f, err := os.Open(filepath.Join("data", "free.txt"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if d := sc.Text(); d != "" && !strings.HasPrefix(d, "#") {
			add(d)
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// TestSuggestTypoMatchesReference runs the fast matcher and the reference on
// tens of thousands of inputs at every edit budget: the speed-up must not
// change a single suggestion.
func TestSuggestTypoMatchesReference(t *testing.T) {
	domains := differentialDomains(t)
	suggested := 0
	for _, d := range domains {
		for maxEdits := 0; maxEdits <= 3; maxEdits++ {
			got, gotOK := SuggestTypo(d, maxEdits)
			want, wantOK := typoReference(d, maxEdits)
			if got != want || gotOK != wantOK {
				t.Errorf("SuggestTypo(%q, %d) = %q, %v; the reference says %q, %v", d, maxEdits, got, gotOK, want, wantOK)
			}
			if wantOK && maxEdits == 3 {
				suggested++
			}
		}
	}
	// Without enough corrections among the inputs the comparison would
	// prove little.
	if suggested < 1000 {
		t.Errorf("only %d of %d inputs get a suggestion; the differential set is too far from the providers", suggested, len(domains))
	}
	t.Logf("%d inputs, %d suggestions", len(domains), suggested)
}

// TestDistanceMatchesReference compares the uint8 distance with the int
// one on pairs of provider labels and their neighbours.
func TestDistanceMatchesReference(t *testing.T) {
	domains := differentialDomains(t)
	r := rand.New(rand.NewPCG(13, 3))
	for range 50000 {
		a, b := domains[r.IntN(len(domains))], domains[r.IntN(len(domains))]
		for max := range 4 {
			if got, want := distance(a, b, max), referenceDistance(a, b, max); got != want {
				t.Fatalf("distance(%q, %q, %d) = %d, the reference says %d", a, b, max, got, want)
			}
		}
	}
}

func FuzzSuggestTypoMatchesReference(f *testing.F) {
	for _, s := range []string{"gmial.com", "mgail.com", "gmail.con", "gmail.com", "ao.com", "hotmial.co.uk", "", ".", "a.b.c", "ggmail.com", "yhaoo.com", "gmail.co\x00"} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, d string, maxEdits int) {
		got, gotOK := SuggestTypo(d, maxEdits)
		want, wantOK := typoReference(d, maxEdits)
		if got != want || gotOK != wantOK {
			t.Fatalf("SuggestTypo(%q, %d) = %q, %v; the reference says %q, %v", d, maxEdits, got, gotOK, want, wantOK)
		}
	})
}
