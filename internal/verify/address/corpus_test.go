package address

import (
	"bufio"
	"errors"
	"os"
	"strings"
	"testing"
)

// corpusRow is one test of the isemail suite (testdata/isemail-syntax.tsv).
type corpusRow struct {
	addr, category, diagnosis, expect, id string
}

// decodeControlPictures turns the corpus' visible stand-ins back into the
// control characters they stand for: U+2400+n is byte n, U+2421 is DEL.
func decodeControlPictures(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 0x2400 && r <= 0x241f:
			return r - 0x2400
		case r == 0x2421:
			return 0x7f
		}
		return r
	}, s)
}

func readCorpus(tb testing.TB) []corpusRow {
	tb.Helper()
	f, err := os.Open("testdata/isemail-syntax.tsv")
	if err != nil {
		tb.Fatalf("open corpus: %v", err)
	}
	defer f.Close()
	var rows []corpusRow
	sc := bufio.NewScanner(f)
	header := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if !header {
			header = true // column names
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) != 5 {
			tb.Fatalf("corpus line %q: %d fields, want 5", line, len(fields))
		}
		rows = append(rows, corpusRow{
			addr:      decodeControlPictures(fields[0]),
			category:  fields[1],
			diagnosis: fields[2],
			expect:    fields[3],
			id:        fields[4],
		})
	}
	if err := sc.Err(); err != nil {
		tb.Fatalf("read corpus: %v", err)
	}
	if len(rows) < 160 {
		tb.Fatalf("corpus has %d rows, want the 164 isemail tests", len(rows))
	}
	return rows
}

// eitherDecision is our RFC 5321 decision for the isemail diagnoses that
// isemail itself leaves to the application (expect "either"). An empty rule
// means accept; otherwise the rejection must report one of the rules.
var eitherDecision = map[string][]string{
	// Syntactically valid; whether the domain receives mail is for DNS.
	"ISEMAIL_DNSWARN_NO_RECORD":    nil,
	"ISEMAIL_DNSWARN_NO_MX_RECORD": nil,
	// Dotless domains are valid syntax (test@org).
	"ISEMAIL_RFC5321_TLD": nil,
	// A numeric last label is an IP address, not a domain.
	"ISEMAIL_RFC5321_TLDNUMERIC": {RuleNumericTLD},
	// RFC 5321 Quoted-string local parts are accepted.
	"ISEMAIL_RFC5321_QUOTEDSTRING": nil,
	// Domain literals, valid or not, are rejected (see the package doc).
	"ISEMAIL_RFC5321_ADDRESSLITERAL":  {RuleDomainLiteral},
	"ISEMAIL_RFC5321_IPV6DEPRECATED":  {RuleDomainLiteral},
	"ISEMAIL_RFC5322_DOMAINLITERAL":   {RuleDomainLiteral},
	"ISEMAIL_RFC5322_DOMLIT_OBSDTEXT": {RuleDomainLiteral},
	"ISEMAIL_RFC5322_IPV6_GRPCOUNT":   {RuleDomainLiteral},
	"ISEMAIL_RFC5322_IPV6_BADCHAR":    {RuleDomainLiteral},
	"ISEMAIL_RFC5322_IPV6_MAXGRPS":    {RuleDomainLiteral},
	"ISEMAIL_RFC5322_IPV6_COLONSTRT":  {RuleDomainLiteral},
	"ISEMAIL_RFC5322_IPV6_COLONEND":   {RuleDomainLiteral},
	"ISEMAIL_RFC5322_IPV6_2X2XCOLON":  {RuleDomainLiteral},
	// RFC 5321 section 4.5.3.1 length limits.
	"ISEMAIL_RFC5322_LOCAL_TOOLONG":  {RuleLocalTooLong},
	"ISEMAIL_RFC5322_LABEL_TOOLONG":  {RuleLabelTooLong},
	"ISEMAIL_RFC5322_DOMAIN_TOOLONG": {RuleDomainTooLong},
	// isemail allows 255-octet domains; RFC 5321 paths leave 253, so a row
	// with a 254-255 octet domain breaks the domain limit first.
	"ISEMAIL_RFC5322_TOOLONG": {RulePathTooLong, RuleDomainTooLong},
	// RFC 5322 general domains are not host names (test@iana/icann.org).
	"ISEMAIL_RFC5322_DOMAIN": {RuleBadLabel},
	// Obsolete local parts ("test"."test") are not RFC 5321 syntax.
	"ISEMAIL_DEPREC_LOCALPART": {RuleBadQuoted},
	// Comments are not RFC 5321 syntax.
	"ISEMAIL_CFWS_COMMENT":   {RuleComment},
	"ISEMAIL_DEPREC_COMMENT": {RuleComment},
	// White space inside the address (not merely around it) is not allowed;
	// a comment next to the "@" neither.
	"ISEMAIL_DEPREC_CFWS_NEAR_AT": {RuleWhitespace, RuleComment},
	"ISEMAIL_DEPREC_FWS":          {RuleWhitespace},
	// Folding white space: only surrounding spaces and tabs are trimmed; the
	// rows with CR LF are caught by the control character rule first.
	"ISEMAIL_CFWS_FWS": nil,
	// Obsolete qtext, ctext and quoted-pairs: all of these rows are control
	// characters.
	"ISEMAIL_DEPREC_QP":    {RuleControlChar},
	"ISEMAIL_DEPREC_QTEXT": {RuleControlChar},
	"ISEMAIL_DEPREC_CTEXT": {RuleControlChar},
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

func TestIsemailCorpus(t *testing.T) {
	var accepted, rejected int
	for _, row := range readCorpus(t) {
		name := row.id + "/" + row.diagnosis
		t.Run(name, func(t *testing.T) {
			var wantAccept bool
			var wantRules []string
			switch row.expect {
			case "accept":
				wantAccept = true
			case "reject":
			case "either":
				rules, ok := eitherDecision[row.diagnosis]
				if !ok {
					t.Fatalf("no decision recorded for diagnosis %s (address %q)", row.diagnosis, row.addr)
				}
				wantAccept, wantRules = rules == nil, rules
			default:
				t.Fatalf("unknown expect %q", row.expect)
			}
			// A control character anywhere is rejected, and this rule is
			// checked before any other.
			if hasControl(strings.Trim(row.addr, " \t")) {
				wantAccept, wantRules = false, []string{RuleControlChar}
			}

			a, err := Parse(row.addr)
			if wantAccept {
				if err != nil {
					t.Fatalf("Parse(%q) = %v, want accepted", row.addr, err)
				}
				accepted++
				if b, err := Parse(a.String()); err != nil || b != a {
					t.Fatalf("Parse(%q) = %+v, %v, want %+v (idempotent)", a.String(), b, err, a)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want rejected", row.addr, a)
			}
			rejected++
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q) error %T, want *SyntaxError", row.addr, err)
			}
			if a != (Address{}) {
				t.Errorf("Parse(%q) returned %+v with its error, want the zero Address", row.addr, a)
			}
			if wantRules != nil && !contains(wantRules, se.Rule) {
				t.Errorf("Parse(%q) rule %q, want one of %q", row.addr, se.Rule, wantRules)
			}
		})
	}
	t.Logf("%d rows accepted, %d rejected", accepted, rejected)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
