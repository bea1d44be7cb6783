package address

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// parseCase is one table row: want is the accepted address, or rule the
// expected rejection.
type parseCase struct {
	name string
	in   string
	want Address
	rule string
}

func runCases(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.in)
			if tc.rule != "" {
				var se *SyntaxError
				if !errors.As(err, &se) {
					t.Fatalf("Parse(%q) = %+v, %v; want rule %q", tc.in, got, err, tc.rule)
				}
				if se.Rule != tc.rule {
					t.Fatalf("Parse(%q) rule %q, want %q", tc.in, se.Rule, tc.rule)
				}
				if got != (Address{}) {
					t.Fatalf("Parse(%q) returned %+v with its error, want the zero Address", tc.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q) error %v, want %+v", tc.in, err, tc.want)
			}
			if got != tc.want {
				t.Fatalf("Parse(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
			again, err := Parse(got.String())
			if err != nil || again != got {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v (normalising is idempotent)", got.String(), again, err, got)
			}
		})
	}
}

func ascii(local, domain string) Address { return Address{Local: local, Domain: domain} }

func TestParseBasics(t *testing.T) {
	runCases(t, []parseCase{
		{name: "plain", in: "john.doe@example.com", want: ascii("john.doe", "example.com")},
		{name: "all atext", in: "!#$%&'*+-/=?^_`{|}~09AZaz@example.com", want: ascii("!#$%&'*+-/=?^_`{|}~09AZaz", "example.com")},
		{name: "upper-case domain lowered, local kept", in: "Alice.Smith@Good.EXAMPLE", want: ascii("Alice.Smith", "good.example")},
		{name: "single-label domain", in: "test@io", want: ascii("test", "io")},
		{name: "digits in labels", in: "test@123.com", want: ascii("test", "123.com")},
		{name: "double hyphen inside a label", in: "test@c--n.com", want: ascii("test", "c--n.com")},
		{name: "tld with a digit", in: "test@example.a1", want: ascii("test", "example.a1")},
		{name: "empty", in: "", rule: RuleEmpty},
		{name: "blanks only", in: " \t ", rule: RuleEmpty},
		{name: "no at", in: "john.doe.example.com", rule: RuleNoAt},
		{name: "no local", in: "@example.com", rule: RuleEmptyLocal},
		{name: "at only", in: "@", rule: RuleEmptyLocal},
		{name: "no domain", in: "john@", rule: RuleEmptyDomain},
		{name: "second at", in: "a@b@example.com", rule: RuleBadLabel},
		{name: "leading dot", in: ".john@example.com", rule: RuleDotPosition},
		{name: "trailing dot", in: "john.@example.com", rule: RuleDotPosition},
		{name: "consecutive dots", in: "jo..hn@example.com", rule: RuleConsecutiveDot},
		{name: "bad local char", in: "jo,hn@example.com", rule: RuleBadLocalChar},
		{name: "backslash outside quotes", in: `jo\hn@example.com`, rule: RuleBadLocalChar},
		{name: "quote inside atom", in: `jo"hn"@example.com`, rule: RuleBadLocalChar},
		{name: "inner space", in: "john doe@example.com", rule: RuleWhitespace},
		{name: "space near at", in: "john @example.com", rule: RuleWhitespace},
		{name: "space in domain", in: "john@ example.com", rule: RuleWhitespace},
		{name: "no-break space", in: "john\u00a0doe@example.com", rule: RuleWhitespace},
		{name: "ideographic space", in: "john@example.com\u3000", rule: RuleWhitespace},
		{name: "comment in local", in: "(c)john@example.com", rule: RuleComment},
		{name: "comment in domain", in: "john@example.com(c)", rule: RuleComment},
		{name: "domain leading dot", in: "john@.example.com", rule: RuleDotPosition},
		{name: "domain trailing dot", in: "john@example.com.", rule: RuleDotPosition},
		{name: "domain consecutive dots", in: "john@example..com", rule: RuleConsecutiveDot},
		{name: "label leading hyphen", in: "john@-example.com", rule: RuleBadLabel},
		{name: "label trailing hyphen", in: "john@example-.com", rule: RuleBadLabel},
		{name: "tld trailing hyphen", in: "john@example.com-", rule: RuleBadLabel},
		{name: "underscore in domain", in: "john@exa_mple.com", rule: RuleBadLabel},
		{name: "slash in domain", in: "john@iana/icann.org", rule: RuleBadLabel},
		{name: "numeric tld", in: "a@1.2.3.4", rule: RuleNumericTLD},
		{name: "numeric tld after a name", in: "a@example.123", rule: RuleNumericTLD},
		{name: "numeric single label", in: "a@123", rule: RuleNumericTLD},
		{name: "ipv4 literal", in: "a@[1.2.3.4]", rule: RuleDomainLiteral},
		{name: "ipv6 literal", in: "a@[IPv6:2001:db8::1]", rule: RuleDomainLiteral},
		{name: "bracket inside domain", in: "a@b[1.2.3.4]", rule: RuleDomainLiteral},
	})
}

func TestParseTrimming(t *testing.T) {
	runCases(t, []parseCase{
		{name: "leading space", in: " john@example.com", want: ascii("john", "example.com")},
		{name: "trailing space", in: "john@example.com ", want: ascii("john", "example.com")},
		{name: "tabs and spaces", in: "\t \tjohn@Example.com \t", want: ascii("john", "example.com")},
		{name: "trailing newline is not trimmed", in: "john@example.com\n", rule: RuleControlChar},
		{name: "leading CR LF is not trimmed", in: "\r\n john@example.com", rule: RuleControlChar},
		{name: "vertical tab is not trimmed", in: "\vjohn@example.com", rule: RuleControlChar},
		{name: "no-break space is not trimmed", in: "\u00a0john@example.com", rule: RuleWhitespace},
	})
}

func TestParseControlChars(t *testing.T) {
	runCases(t, []parseCase{
		{name: "NUL in local", in: "jo\x00hn@example.com", rule: RuleControlChar},
		{name: "DEL in domain", in: "john@exam\x7fple.com", rule: RuleControlChar},
		{name: "CR at end", in: "john@example.com\r", rule: RuleControlChar},
		{name: "LF in middle", in: "john\n@example.com", rule: RuleControlChar},
		{name: "control in quotes", in: "\"jo\x01hn\"@example.com", rule: RuleControlChar},
		{name: "escaped control in quotes", in: "\"jo\\\x01hn\"@example.com", rule: RuleControlChar},
		{name: "tab inside quotes", in: "\"jo\thn\"@example.com", rule: RuleControlChar},
		{name: "C1 control (NEL)", in: "jo\u0085hn@example.com", rule: RuleControlChar},
		{name: "C1 control in domain", in: "john@exa\u009fmple.com", rule: RuleControlChar},
		{name: "byte order mark", in: "\ufeffjohn@example.com", rule: RuleControlChar},
		{name: "bidi override", in: "jo\u202ehn@example.com", rule: RuleControlChar},
		{name: "soft hyphen in domain", in: "john@exam\u00adple.com", rule: RuleControlChar},
		{name: "zero-width non-joiner kept", in: "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645@example.com",
			want: Address{Local: "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645", Domain: "example.com", UTF8Local: true}},
		{name: "invalid UTF-8", in: "jo\xffhn@example.com", rule: RuleBadUTF8},
		{name: "truncated UTF-8", in: "john@b\xc3", rule: RuleBadUTF8},
	})
}

func TestParseQuoted(t *testing.T) {
	runCases(t, []parseCase{
		{name: "simple", in: `"john"@example.com`, want: ascii(`"john"`, "example.com")},
		{name: "space", in: `"john doe"@example.com`, want: ascii(`"john doe"`, "example.com")},
		{name: "at sign", in: `"a@b"@example.com`, want: ascii(`"a@b"`, "example.com")},
		{name: "empty", in: `""@example.com`, want: ascii(`""`, "example.com")},
		{name: "escaped quote", in: `"a\"b"@example.com`, want: ascii(`"a\"b"`, "example.com")},
		{name: "escaped backslash", in: `"a\\b"@example.com`, want: ascii(`"a\\b"`, "example.com")},
		{name: "escaped letter", in: `"\a"@example.com`, want: ascii(`"\a"`, "example.com")},
		{name: "specials", in: `"(),:;<>[]."@Example.com`, want: ascii(`"(),:;<>[]."`, "example.com")},
		{name: "utf-8", in: `"jöhn doe"@example.com`, want: Address{Local: `"jöhn doe"`, Domain: "example.com", UTF8Local: true}},
		{name: "unclosed", in: `"john@example.com`, rule: RuleBadQuoted},
		{name: "escaped closing quote", in: `"john\"@example.com`, rule: RuleBadQuoted},
		{name: "backslash at end", in: `"john\`, rule: RuleBadQuoted},
		{name: "escaped utf-8", in: `"\ö"@example.com`, rule: RuleBadQuoted},
		{name: "text after quotes", in: `"john"doe@example.com`, rule: RuleBadQuoted},
		{name: "obsolete dotted quoted", in: `"john"."doe"@example.com`, rule: RuleBadQuoted},
		{name: "obsolete quoted then atom", in: `"john".doe@example.com`, rule: RuleBadQuoted},
		{name: "three quotes", in: `"""@example.com`, rule: RuleBadQuoted},
		{name: "no domain part", in: `"john"`, rule: RuleNoAt},
	})
}

func TestParseIDN(t *testing.T) {
	long := strings.Repeat("例", 40) // 120 octets, A-label of 46
	runCases(t, []parseCase{
		{name: "utf-8 local and IDN domain", in: "用户@例子.广告",
			want: Address{Local: "用户", Domain: "xn--fsqu00a.xn--4rr70v", UTF8Local: true, IDN: true}},
		{name: "ideographic full stop", in: "用户@例子。广告",
			want: Address{Local: "用户", Domain: "xn--fsqu00a.xn--4rr70v", UTF8Local: true, IDN: true}},
		{name: "mixed ASCII and U-label", in: "user@Bücher.example",
			want: Address{Local: "user", Domain: "xn--bcher-kva.example", IDN: true}},
		{name: "upper-case U-label mapped", in: "user@BÜCHER.Example",
			want: Address{Local: "user", Domain: "xn--bcher-kva.example", IDN: true}},
		{name: "non-transitional sharp s", in: "user@faß.de",
			want: Address{Local: "user", Domain: "xn--fa-hia.de", IDN: true}},
		{name: "A-label input", in: "user@XN--BCHER-KVA.example",
			want: Address{Local: "user", Domain: "xn--bcher-kva.example", IDN: true}},
		{name: "A-labels only", in: "test@xn--hxajbheg2az3al.xn--jxalpdlp",
			want: Address{Local: "test", Domain: "xn--hxajbheg2az3al.xn--jxalpdlp", IDN: true}},
		{name: "full-width ASCII mapped, not IDN", in: "user@ｅｘａｍｐｌｅ.com",
			want: Address{Local: "user", Domain: "example.com"}},
		{name: "utf-8 local, ASCII domain", in: "jöhn@example.com",
			want: Address{Local: "jöhn", Domain: "example.com", UTF8Local: true}},
		{name: "domain limit applies after conversion", in: "a@" + long + "." + long + "." + long,
			want: Address{Local: "a", Domain: "xn--" + punyRepeat + ".xn--" + punyRepeat + ".xn--" + punyRepeat, IDN: true}},
		{name: "A-label decoding to upper case", in: "user@xn--cher-fna.example", rule: RuleBadIDN},
		{name: "A-label of ASCII only (ends in a hyphen)", in: "user@xn--abc-.example", rule: RuleBadLabel},
		{name: "bidi rule", in: "user@aא.example", rule: RuleBadIDN},
		{name: "disallowed code point", in: "user@exa\u0378mple.com", rule: RuleBadIDN},
		{name: "STD3 symbol", in: "user@exa\uff0fmple.com", rule: RuleBadIDN},
		{name: "U-label leading hyphen", in: "user@-bücher.example", rule: RuleBadLabel},
		{name: "U-label trailing hyphen", in: "user@bücher-.example", rule: RuleBadLabel},
		{name: "IDN consecutive dots", in: "user@bücher..example", rule: RuleConsecutiveDot},
		{name: "IDN trailing dot", in: "user@bücher.example.", rule: RuleDotPosition},
		{name: "IDN trailing ideographic stop", in: "user@bücher.example。", rule: RuleDotPosition},
		{name: "IDN numeric tld", in: "user@bücher.123", rule: RuleNumericTLD},
		{name: "IDN comment", in: "user@bücher.example(x)", rule: RuleComment},
		{name: "A-label over 63 octets", in: "user@" + strings.Repeat("a", 58) + "ü.example", rule: RuleLabelTooLong},
		{name: "A-label domain over 253 octets", in: "a@" + strings.Repeat(strings.Repeat("a", 50)+"ü.", 4) + strings.Repeat("b", 18), rule: RuleDomainTooLong},
	})
}

// punyRepeat is the Punycode of forty U+4F8B, computed with an independent
// RFC 3492 implementation (Python's punycode codec).
const punyRepeat = "fsqaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func TestParseLengthLimits(t *testing.T) {
	l64 := strings.Repeat("a", 64)
	label63 := strings.Repeat("b", 63)
	// domainOf returns a valid domain of exactly n octets, in labels of 63.
	domainOf := func(n int) string {
		var b strings.Builder
		for b.Len() < n {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			rest := n - b.Len()
			switch {
			case rest > 64:
				b.WriteString(label63)
			case rest == 64: // avoid leaving a 0-octet label
				b.WriteString(label63[:62])
			default:
				b.WriteString(strings.Repeat("c", rest))
			}
		}
		if b.Len() != n {
			t.Fatalf("domainOf(%d) built %d octets", n, b.Len())
		}
		return b.String()
	}
	d252, d253, d254 := domainOf(252), domainOf(253), domainOf(254)
	runCases(t, []parseCase{
		{name: "local 64", in: l64 + "@example.com", want: ascii(l64, "example.com")},
		{name: "local 65", in: l64 + "a@example.com", rule: RuleLocalTooLong},
		{name: "quoted local 64 with quotes", in: `"` + l64[:62] + `"@example.com`, want: ascii(`"`+l64[:62]+`"`, "example.com")},
		{name: "quoted local 65 with quotes", in: `"` + l64[:63] + `"@example.com`, rule: RuleLocalTooLong},
		{name: "utf-8 local 64 octets", in: strings.Repeat("ö", 32) + "@example.com", want: Address{Local: strings.Repeat("ö", 32), Domain: "example.com", UTF8Local: true}},
		{name: "utf-8 local 66 octets", in: strings.Repeat("ö", 33) + "@example.com", rule: RuleLocalTooLong},
		{name: "label 63", in: "a@" + label63 + ".com", want: ascii("a", label63+".com")},
		{name: "label 64", in: "a@" + label63 + "b.com", rule: RuleLabelTooLong},
		{name: "tld label 64", in: "a@example." + label63 + "b", rule: RuleLabelTooLong},
		{name: "path 254", in: "a@" + d252, want: ascii("a", d252)},
		{name: "path 254 with upper case", in: "a@" + strings.ToUpper(d252), want: ascii("a", d252)},
		{name: "domain 253 fits the domain limit but not the path", in: "a@" + d253, rule: RulePathTooLong},
		{name: "domain 254", in: "a@" + d254, rule: RuleDomainTooLong},
		{name: "path 255 from a long local part", in: l64 + "@" + domainOf(190), rule: RulePathTooLong},
		{name: "path 254 from a long local part", in: l64 + "@" + domainOf(189), want: ascii(l64, domainOf(189))},
		{name: "surrounding blanks do not count", in: "  a@" + d252 + "\t", want: ascii("a", d252)},
	})
}

// TestParseIdempotent checks the normalisation property on generated
// addresses: whatever Parse accepts, it accepts again unchanged.
func TestParseIdempotent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"a", "Z", "9", ".", "-", "+", "_", "ö", "例", `"`, `\`, " ", "@", "Bücher", "xn--bcher-kva", "EXAMPLE", "com", "。", "ß", "(", "[", "1"}
	accepted := 0
	for i := 0; i < 20000; i++ {
		var b strings.Builder
		for n := 1 + rng.IntN(12); n > 0; n-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		if rng.IntN(2) == 0 { // make an "@" likely
			b.WriteString("@" + pieces[rng.IntN(len(pieces))] + "." + pieces[rng.IntN(len(pieces))])
		}
		in := b.String()
		a, err := Parse(in)
		if err != nil {
			continue
		}
		accepted++
		again, err := Parse(a.String())
		if err != nil || again != a {
			t.Fatalf("Parse(%q) = %+v; Parse(%q) = %+v, %v", in, a, a.String(), again, err)
		}
	}
	if accepted < 500 {
		t.Fatalf("only %d generated addresses accepted: the generator no longer exercises the property", accepted)
	}
}

func TestSyntaxError(t *testing.T) {
	_, err := Parse("john@")
	if err == nil || err.Error() != "invalid email address: empty_domain" {
		t.Fatalf("error text %v", err)
	}
	_, err2 := Parse("jane@")
	if err != err2 {
		t.Fatalf("rejections for one rule are not the shared value")
	}
}

func TestParseDoesNotAllocate(t *testing.T) {
	for _, in := range []string{
		"john.doe+news@example.com",
		" john.doe@sub.example.co.uk\t",
		`"john doe"@example.com`,
		"jöhn@example.com",
		"john..doe@example.com",
		"john.doe@example",
		"john.doe@[192.0.2.1]",
		"",
	} {
		if n := testing.AllocsPerRun(100, func() { _, _ = Parse(in) }); n != 0 {
			t.Errorf("Parse(%q) allocates %.0f times, want 0", in, n)
		}
	}
}
