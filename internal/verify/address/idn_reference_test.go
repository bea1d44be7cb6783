package address

import (
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// parseDomainReference is parseDomain as it was before it took the Unicode
// form of a non-ASCII domain from the input instead of decoding the
// A-labels made from it: kept as the specification the change is checked
// against.
func parseDomainReference(d string) (string, bool, *SyntaxError) {
	if d[0] == '[' {
		return "", false, errDomainLiteral
	}
	upper, nonASCII := false, false
	for i := 0; i < len(d); i++ {
		switch c := d[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '.':
		case 'A' <= c && c <= 'Z':
			upper = true
		case c >= utf8.RuneSelf:
			nonASCII = true
		case c == '(' || c == ')':
			return "", false, errComment
		case c == ' ' || c == '\t':
			return "", false, errWhitespace
		case c == '[' || c == ']':
			return "", false, errDomainLiteral
		default:
			return "", false, errBadLabel
		}
	}
	if nonASCII {
		if e := checkDots(d); e != nil {
			return "", false, e
		}
		a, err := idnaProfile.ToASCII(d)
		if err != nil {
			return "", false, errBadIDN
		}
		d = a
	} else if upper {
		d = strings.ToLower(d)
	}
	ace, long, tld, e := checkLabels(d)
	if e != nil {
		return "", false, e
	}
	if ace {
		// A-labels, given or made: decode them to check that they are valid
		// IDNs and that no U-label starts or ends with a hyphen (the A-label
		// form hides it).
		u, err := idnaProfile.ToUnicode(d)
		if err != nil {
			return "", false, errBadIDN
		}
		if e := checkHyphens(u); e != nil {
			return "", false, e
		}
	}
	switch {
	case long:
		return "", false, errLabelTooLong
	case len(d) > maxDomain:
		return "", false, errDomainTooLong
	case allDigits(tld):
		return "", false, errNumericTLD
	}
	return d, ace, nil
}

// idnPieces are the parts generated domains are made of: text in many
// scripts, text that UTS #46 maps (upper case, full-width, compatibility
// forms), ignores (variation selectors) or normalises (combining marks),
// deviations (ß, ς, joiners), right-to-left text and digits (Bidi rule),
// hyphens that end up at a label's edge only after mapping, other dots,
// and A-labels, valid or not.
var idnPieces = []string{
	"a", "b", "z", "0", "7", "-", "--", ".", "example", "com", "de", "xn--",
	"ü", "Ü", "bücher", "straße", "ß", "ẞ", "é", "e\u0301", "\u0301", "o\u0308",
	"ｅｘａｍｐｌｅ", "Ａ", "ⅻ", "ﬁ", "㎏", "\ufe00", "\ufe0f", "\u034f",
	"ς", "σ", "Σ", "θεός", "παράδειγμα", "пример", "рф", "ПРИМЕР",
	"例子", "中国", "例え", "アドレス", "ｱ", "한국", "\u1100\u1161", "ไทย",
	"مثال", "إختبار", "٣", "٠١٢", "۳", "עברית", "א", "\u05d0\u05b7",
	"क्", "क्\u200d", "\u200c", "\u200d", "ක්\u200cෂ", "\u0644\u200c\u0627",
	"。", "．", "｡", "\u2010", "\uff0d", "_", "xn--bcher-kva", "xn--mller-kva",
	"xn--zz", "xn--a", "xn--ls8h", "xn--80ak6aa92e", "xn--nxasmq6b", "xn--strae-oqa",
	"XN--BCHER-KVA", "xn--ss-", "\ufffd", "\ufffc", "xn--zn7c", "\u00ad", "\u0130", "İ", "ǅ", "Ω", "Ω", "K",
}

// generatedIDNs returns seeded random domains made of idnPieces, and the
// IDN-looking domains of the isemail corpus.
func generatedIDNs(tb testing.TB, n int) []string {
	tb.Helper()
	r := rand.New(rand.NewPCG(13, 4))
	out := make([]string, 0, n)
	for range n {
		var b strings.Builder
		for k := 1 + r.IntN(6); k > 0; k-- {
			b.WriteString(idnPieces[r.IntN(len(idnPieces))])
		}
		if r.IntN(2) == 0 {
			b.WriteString("." + idnPieces[r.IntN(len(idnPieces))])
		}
		out = append(out, b.String())
	}
	for _, row := range readCorpus(tb) {
		if at := strings.LastIndexByte(row.addr, '@'); at >= 0 && at+1 < len(row.addr) {
			out = append(out, row.addr[at+1:])
		}
	}
	return out
}

// TestIDNUnicodeForm runs parseDomain and its reference on generated
// domains: taking the Unicode form from the input must change no verdict.
func TestIDNUnicodeForm(t *testing.T) {
	accepted, idn := 0, 0
	for _, d := range generatedIDNs(t, 200000) {
		if !reachesParseDomain(d) {
			continue
		}
		got, gotIDN, gotErr := parseDomain(d)
		want, wantIDN, wantErr := parseDomainReference(d)
		if got != want || gotIDN != wantIDN || gotErr != wantErr {
			t.Errorf("parseDomain(%+q) = %q, %v, %v; the reference says %q, %v, %v", d, got, gotIDN, gotErr, want, wantIDN, wantErr)
		}
		if wantErr == nil {
			accepted++
			if wantIDN {
				idn++
			}
		}
	}
	// The comparison proves little unless many generated domains are
	// valid IDNs, and many are not.
	if idn < 20000 || accepted > 190000 {
		t.Errorf("%d generated domains accepted, %d of them IDNs: the generator has drifted", accepted, idn)
	}
	t.Logf("%d accepted, %d IDNs", accepted, idn)
}

// reachesParseDomain reports whether Parse can hand d to parseDomain: it is
// not empty, and Parse's checks of the whole address (control characters,
// UTF-8, invisible characters, non-ASCII spaces) pass. Outside that domain
// the two need not agree: invalid UTF-8, which Parse has rejected before,
// is mapped to U+FFFD by one and refused by the other.
func reachesParseDomain(d string) bool {
	if d == "" {
		return false
	}
	for i := 0; i < len(d); i++ {
		if c := d[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return checkUTF8(d) == nil
}

func FuzzIDNUnicodeForm(f *testing.F) {
	for _, d := range generatedIDNs(f, 200) {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, d string) {
		if !reachesParseDomain(d) {
			return
		}
		got, gotIDN, gotErr := parseDomain(d)
		want, wantIDN, wantErr := parseDomainReference(d)
		if got != want || gotIDN != wantIDN || gotErr != wantErr {
			t.Fatalf("parseDomain(%+q) = %q, %v, %v; the reference says %q, %v, %v", d, got, gotIDN, gotErr, want, wantIDN, wantErr)
		}
	})
}
