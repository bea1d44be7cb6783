package server

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// refGlob is the obviously correct matcher the linear one is held to: a
// regular expression with every byte quoted, '*' as .* and '?' as one byte.
// Each byte is mapped to the rune of the same value, so '?' means one byte
// (as in glob) even in UTF-8 or invalid input.
func refGlob(t testing.TB, p, s string) bool {
	var b strings.Builder
	b.WriteString(`(?s)\A`)
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(rune(p[i]))))
		}
	}
	b.WriteString(`\z`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		t.Fatalf("reference for %q: %v", p, err)
	}
	return re.MatchString(latin1(s))
}

func latin1(s string) string {
	r := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		r[i] = rune(s[i])
	}
	return string(r)
}

const stageARN = "arn:aws:execute-api:local:000000000000:evs/local/"

func TestGlob(t *testing.T) {
	long := strings.Repeat("ab?", 50) // a '?' segment over two words
	tests := []struct {
		p, s string
		want bool
	}{
		{"", "", true},
		{"", "a", false},
		{"*", "", true},
		{"*", "anything/at/all", true},
		{"**", "x", true},
		{"a", "a", true},
		{"a", "b", false},
		{"?", "", false},
		{"?", "é"[:1], true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{stageARN + "*/*", stageARN + "POST/v1/verify", true},
		{stageARN + "*/*", stageARN + "POST", false},
		{stageARN + "*/*", "arn:aws:execute-api:local:000000000000:evs/other/POST/v1/verify", false},
		{stageARN + "POST/v1/verify", stageARN + "POST/v1/verify", true},
		{stageARN + "POST/v1/verify", stageARN + "POST/v1/verify/", false},
		{"*a*b*c*", "xxaxxbxxcxx", true},
		{"*a*b*c*", "xxaxxcxxbxx", false},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"*ab?ab", "abxabyab", true},
		{"*" + long + "*", "x" + strings.Repeat("abz", 50) + "y", true},
		{"*" + long + "*", "x" + strings.Repeat("abz", 49) + "aaz", false},
		{"*" + long, strings.Repeat("abz", 50), true},
		{"x*" + long + "*y", "x" + strings.Repeat("ab-", 50) + "y", true},
		// The attack: a Deny on the method ARN of a path full of stars,
		// matched against that same ARN, and against a near miss.
		{stageARN + "GET/v1/requests/" + strings.Repeat("*", 50) + "/results", stageARN + "GET/v1/requests/" + strings.Repeat("*", 50) + "/results", true},
		{stageARN + "GET/" + strings.Repeat("*a", 50) + "b", stageARN + "GET/" + strings.Repeat("a", 200), false},
	}
	for _, tt := range tests {
		if got := glob(tt.p, tt.s); got != tt.want {
			t.Errorf("glob(%q, %q) = %v, want %v", tt.p, tt.s, got, tt.want)
		}
		if ref := refGlob(t, tt.p, tt.s); ref != tt.want {
			t.Errorf("reference(%q, %q) = %v, want %v: the table is wrong", tt.p, tt.s, ref, tt.want)
		}
	}
}

// TestGlobLinear counts the bytes the matcher examines on the inputs that
// made the old matcher backtrack: the work stays within a constant times
// len(pattern)+len(path), from 10 to 5,000 stars. (A '?' in a segment longer
// than 64 bytes costs one more word per byte of path per 64 bytes of that
// segment: still linear in the path.)
func TestGlobLinear(t *testing.T) {
	shapes := map[string]func(n int) (p, s string){
		"deny on its own starred path": func(n int) (string, string) {
			arn := stageARN + "GET/v1/requests/" + strings.Repeat("*", n) + "/results"
			return arn, arn
		},
		"near miss": func(n int) (string, string) {
			return stageARN + "GET/" + strings.Repeat("*a", n) + "b", stageARN + "GET/" + strings.Repeat("a", 4*n)
		},
		"question marks": func(n int) (string, string) {
			return "*" + strings.Repeat("a?b*", n), strings.Repeat("axb", 4*n)
		},
		"long segment with a question mark, growing path": func(n int) (string, string) {
			return "*" + strings.Repeat("ab?", 70) + "*", strings.Repeat("abz", 10*n)
		},
		"stageARN policy, starred path": func(n int) (string, string) {
			return stageARN + "*/*", stageARN + "GET/v1/requests/" + strings.Repeat("*", n) + "/results"
		},
	}
	for name, shape := range shapes {
		t.Run(name, func(t *testing.T) {
			for _, n := range []int{10, 50, 500, 5000} {
				p, s := shape(n)
				steps := 0
				got := globCount(p, s, &steps)
				if n <= 500 && got != refGlob(t, p, s) {
					t.Fatalf("n=%d: glob = %v, reference disagrees", n, got)
				}
				if bound := 4 * (len(p) + len(s)*shiftAndWords(p)); steps > bound {
					t.Fatalf("n=%d: %d steps for %d+%d bytes, over the linear bound %d", n, steps, len(p), len(s), bound)
				}
			}
		})
	}
}

// shiftAndWords is the factor Shift-And costs per byte of text: the 64-bit
// words of the longest segment holding a '?' (1 when there is none).
func shiftAndWords(p string) int {
	w := 1
	for _, seg := range strings.Split(p, "*") {
		if strings.Contains(seg, "?") {
			w = max(w, (len(seg)+63)/64)
		}
	}
	return w
}

// BenchmarkGlob times the worst shapes at 10, 50 and 500 stars; linear time
// shows as ns/op growing with the input size, not exponentially with stars.
func BenchmarkGlob(b *testing.B) {
	for _, n := range []int{10, 50, 500} {
		arn := stageARN + "GET/v1/requests/" + strings.Repeat("*", n) + "/results"
		b.Run(fmt.Sprintf("own-path/stars=%d", n), func(b *testing.B) {
			for b.Loop() {
				if !glob(arn, arn) {
					b.Fatal("no match")
				}
			}
		})
		// Every segment but the last is found at once; "b" is searched for
		// through the rest of the path.
		p, s := stageARN+"GET/"+strings.Repeat("*a", n)+"*b*", stageARN+"GET/"+strings.Repeat("a", 4*n)
		b.Run(fmt.Sprintf("near-miss/stars=%d", n), func(b *testing.B) {
			for b.Loop() {
				if glob(p, s) {
					b.Fatal("match")
				}
			}
		})
	}
}

// FuzzGlob holds the linear matcher to the regular-expression reference on
// patterns and texts over a small alphabet, where matches are frequent.
func FuzzGlob(f *testing.F) {
	f.Add("*a*b?", "xaxbz")
	f.Add(stageARN+"*/*", stageARN+"GET/v1/verify")
	f.Add("a**?b*", "ab")
	f.Add("?*?", "\xff")
	f.Fuzz(func(t *testing.T, p, s string) {
		if len(p) > 300 || len(s) > 300 {
			return
		}
		if got, want := glob(p, s), refGlob(t, p, s); got != want {
			t.Fatalf("glob(%q, %q) = %v, reference %v", p, s, got, want)
		}
	})
}
