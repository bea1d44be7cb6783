// Package address is what the engine learns from an address alone: it
// parses addresses with the RFC 5321 mailbox grammar (the one an SMTP
// server applies to RCPT TO) and normalises them, and it holds the
// reference lists (lists.go) and the typo suggestions (suggest.go). Parse
// does not allocate for a plain ASCII address whose domain is lower case.
//
// Decisions where the RFCs leave room, and why:
//
//   - Surrounding spaces and tabs are trimmed (users paste them); nothing else
//     is. Control characters (C0, DEL, C1), invisible format characters (but
//     not the zero-width joiners some scripts need) and non-ASCII white space
//     are rejected: a transport artefact or an injection attempt.
//   - The local part is a dot-atom or an RFC 5321 quoted-string, kept exactly
//     as given; inside quotes printable ASCII and UTF-8 text (RFC 6531).
//     Comments, folding white space and obsolete RFC 5322 forms are rejected.
//   - Domain literals and an all-digit last label are rejected
//     ("domain_literal", "numeric_tld"): no real mailbox sits on a bare IP.
//     Single-label domains are valid: DNS decides whether they receive mail.
//   - Domains are lower-cased and converted to A-labels by UTS #46
//     non-transitional processing, without the "--" check (such labels exist
//     in DNS); Address.IDN reports an internationalised domain however given.
//   - UTF-8 local parts are accepted and flagged: delivery needs SMTPUTF8.
//   - Limits are in octets: local part ≤ 64 (quotes included), domain ≤ 253
//     after A-label conversion, labels ≤ 63, whole address ≤ 254.
//
// When an address breaks several rules, the reported one is the first found:
// control characters, bad UTF-8 and non-ASCII white space anywhere; then the
// local part (characters, then dots, then length); then the domain
// (characters; then label syntax: dots, hyphens, IDNA; then label and domain
// length; then a numeric last label); then the length of the whole address.
package address

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Address is a syntactically valid mailbox.
type Address struct {
	// Local is the local part exactly as given (case kept); a quoted local
	// part keeps its quotes and backslashes.
	Local string
	// Domain is lower-case ASCII; an internationalised domain is in A-labels.
	Domain string
	// UTF8Local reports a local part with non-ASCII characters (RFC 6531):
	// delivering to it needs the SMTPUTF8 extension.
	UTF8Local bool
	// IDN reports an internationalised domain: it has at least one A-label,
	// whether it was given as U-labels or already as A-labels.
	IDN bool
}

// String returns the normalised address, Local + "@" + Domain.
func (a Address) String() string {
	return a.Local + "@" + a.Domain
}

// SyntaxError reports why a string is not a valid mailbox. Parse returns
// shared values, one per rule: callers must not modify them.
type SyntaxError struct {
	// Rule is a short snake_case id of the broken rule, one of the Rule*
	// constants.
	Rule string
}

// Error implements the error interface.
func (e *SyntaxError) Error() string {
	return "invalid email address: " + e.Rule
}

// The rules a SyntaxError can report.
const (
	RuleEmpty          = "empty"            // nothing left after trimming
	RuleControlChar    = "control_char"     // a control character anywhere
	RuleBadUTF8        = "bad_utf8"         // bytes that are not UTF-8
	RuleNoAt           = "no_at"            // no "@" separating local part and domain
	RuleEmptyLocal     = "empty_local"      // nothing before the "@"
	RuleEmptyDomain    = "empty_domain"     // nothing after the "@"
	RuleBadLocalChar   = "bad_local_char"   // a character not allowed in an unquoted local part
	RuleWhitespace     = "whitespace"       // a space or tab inside the address
	RuleComment        = "comment"          // a parenthesis: RFC 5322 comments are not allowed
	RuleBadQuoted      = "bad_quoted"       // a malformed quoted local part, or text after it
	RuleDotPosition    = "dot_position"     // a leading or trailing dot in the local part or domain
	RuleConsecutiveDot = "consecutive_dots" // two dots in a row
	RuleLocalTooLong   = "local_too_long"   // local part over 64 octets
	RuleDomainLiteral  = "domain_literal"   // [IP] domain literals are not accepted
	RuleBadLabel       = "bad_label"        // a domain label with a character or hyphen not allowed in host names
	RuleLabelTooLong   = "label_too_long"   // a domain label over 63 octets
	RuleDomainTooLong  = "domain_too_long"  // domain over 253 octets
	RuleNumericTLD     = "numeric_tld"      // last label all digits: an IP address, not a domain
	RuleBadIDN         = "bad_idn"          // an internationalised domain that UTS #46 rejects
	RulePathTooLong    = "path_too_long"    // whole address over 254 octets
)

// Shared rejections, so that rejecting does not allocate.
var (
	errEmpty          = &SyntaxError{RuleEmpty}
	errControlChar    = &SyntaxError{RuleControlChar}
	errBadUTF8        = &SyntaxError{RuleBadUTF8}
	errNoAt           = &SyntaxError{RuleNoAt}
	errEmptyLocal     = &SyntaxError{RuleEmptyLocal}
	errEmptyDomain    = &SyntaxError{RuleEmptyDomain}
	errBadLocalChar   = &SyntaxError{RuleBadLocalChar}
	errWhitespace     = &SyntaxError{RuleWhitespace}
	errComment        = &SyntaxError{RuleComment}
	errBadQuoted      = &SyntaxError{RuleBadQuoted}
	errDotPosition    = &SyntaxError{RuleDotPosition}
	errConsecutiveDot = &SyntaxError{RuleConsecutiveDot}
	errLocalTooLong   = &SyntaxError{RuleLocalTooLong}
	errDomainLiteral  = &SyntaxError{RuleDomainLiteral}
	errBadLabel       = &SyntaxError{RuleBadLabel}
	errLabelTooLong   = &SyntaxError{RuleLabelTooLong}
	errDomainTooLong  = &SyntaxError{RuleDomainTooLong}
	errNumericTLD     = &SyntaxError{RuleNumericTLD}
	errBadIDN         = &SyntaxError{RuleBadIDN}
	errPathTooLong    = &SyntaxError{RulePathTooLong}
)

// RFC 5321 section 4.5.3.1 limits, in octets.
const (
	maxLocal  = 64
	maxLabel  = 63
	maxDomain = 253
	maxPath   = 254
)

// idnaProfile is UTS #46 lookup processing (non-transitional, STD3 rules,
// Bidi and ContextJ) without CheckHyphens: its "--" in positions 3-4 ban
// would refuse labels that DNS serves and that we accept in ASCII domains.
// Leading and trailing hyphens are checked by checkHyphens instead.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.Transitional(false),
	idna.CheckHyphens(false),
)

// Character classes of the local part: atext of RFC 5322 section 3.2.3.
var atext = func() (t [256]bool) {
	for _, c := range "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-/=?^_`{|}~" {
		t[c] = true
	}
	return t
}()

// Parse checks s against the RFC 5321 mailbox grammar (with RFC 6531 UTF-8)
// and returns it normalised. A non-nil error is always a *SyntaxError.
func Parse(s string) (Address, error) {
	s = trimBlanks(s)
	if s == "" {
		return Address{}, errEmpty
	}
	nonASCII := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7f {
			return Address{}, errControlChar
		}
		if c >= 0x80 {
			nonASCII = true
		}
	}
	if nonASCII {
		if e := checkUTF8(s); e != nil {
			return Address{}, e
		}
	}

	var local, domain string
	var utf8Local bool
	if s[0] == '"' {
		end, u, e := scanQuoted(s)
		if e != nil {
			return Address{}, e
		}
		if end == len(s) {
			return Address{}, errNoAt
		}
		if s[end] != '@' {
			// Text after the closing quote: "a"b or the obsolete "a"."b".
			return Address{}, errBadQuoted
		}
		local, domain, utf8Local = s[:end], s[end+1:], u
	} else {
		at := strings.IndexByte(s, '@')
		if at < 0 {
			return Address{}, errNoAt
		}
		if at == 0 {
			return Address{}, errEmptyLocal
		}
		local, domain = s[:at], s[at+1:]
		u, e := checkDotAtom(local)
		if e != nil {
			return Address{}, e
		}
		utf8Local = u
	}
	if len(local) > maxLocal {
		return Address{}, errLocalTooLong
	}
	if domain == "" {
		return Address{}, errEmptyDomain
	}
	d, idn, e := parseDomain(domain)
	if e != nil {
		return Address{}, e
	}
	if len(local)+1+len(d) > maxPath {
		return Address{}, errPathTooLong
	}
	return Address{Local: local, Domain: d, UTF8Local: utf8Local, IDN: idn}, nil
}

// invisible reports the Unicode format characters that have no business in a
// mailbox (byte order marks, bidi overrides, soft hyphens...): they hide what
// an address really is. The zero-width joiners stay, some scripts need them.
func invisible(r rune) bool {
	return r != 0x200c && r != 0x200d && unicode.Is(unicode.Cf, r)
}

// trimBlanks removes surrounding spaces and tabs, and nothing else: other
// white space is a control character and makes the address invalid.
func trimBlanks(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// checkUTF8 is the slow path for input with non-ASCII bytes: they must be
// UTF-8 and must not encode C1 control characters, invisible format
// characters or white space (a no-break space is almost always pasted by
// accident).
func checkUTF8(s string) *SyntaxError {
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return errBadUTF8
		}
		if r >= 0x80 && r <= 0x9f || invisible(r) {
			return errControlChar
		}
		if unicode.IsSpace(r) {
			return errWhitespace
		}
		i += n
	}
	return nil
}

// checkDotAtom checks an unquoted local part (RFC 5321 Dot-string, with
// RFC 6531 UTF-8) and reports whether it has non-ASCII characters.
func checkDotAtom(l string) (utf8Local bool, e *SyntaxError) {
	dots := 0 // dot-related error found first; reported after characters
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case atext[c]:
		case c == '.':
			if dots != 0 {
				continue
			}
			if i == 0 || i == len(l)-1 {
				dots = 1
			} else if l[i-1] == '.' {
				dots = 2
			}
		case c >= utf8.RuneSelf:
			utf8Local = true
		case c == '(' || c == ')':
			return false, errComment
		case c == ' ' || c == '\t':
			return false, errWhitespace
		default:
			return false, errBadLocalChar
		}
	}
	switch dots {
	case 1:
		return false, errDotPosition
	case 2:
		return false, errConsecutiveDot
	}
	return utf8Local, nil
}

// scanQuoted scans the RFC 5321 Quoted-string at the start of s and returns
// the index just after its closing quote. RFC 6531 adds UTF-8 to qtext but
// not to quoted-pair.
func scanQuoted(s string) (end int, utf8Local bool, e *SyntaxError) {
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return i + 1, utf8Local, nil
		case c == '\\':
			i++
			if i == len(s) || s[i] < 0x20 || s[i] > 0x7e {
				return 0, false, errBadQuoted
			}
		case c >= utf8.RuneSelf:
			utf8Local = true
		}
		// Controls were rejected before: every other byte is qtextSMTP.
	}
	return 0, false, errBadQuoted // unclosed
}

// parseDomain checks a domain and returns it lower-cased, in A-labels, and
// whether it is internationalised.
func parseDomain(d string) (string, bool, *SyntaxError) {
	if d[0] == '[' {
		return "", false, errDomainLiteral
	}
	orig := d
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
		// form hides it). For input with non-ASCII text the Unicode form is
		// taken from the input rather than from the A-labels just made from
		// it: ToASCII accepted the input, so both give the same U-labels and
		// verdict, but mapping the input back costs no punycode decoding and,
		// for text that maps to itself, no allocation. Not for labels over
		// 63 octets: decoding those can fail where mapping does not, and
		// the failure decides the reported rule. TestIDNUnicodeForm and
		// FuzzIDNUnicodeForm compare the two ways.
		src := d
		if nonASCII && !long {
			src = orig
		}
		u, err := idnaProfile.ToUnicode(src)
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

// checkDots reports misplaced dots in a domain before IDNA processing, which
// would otherwise report them as a generic IDN error. Only ASCII dots are
// seen: UTS #46 maps the ideographic full stops, and checkHost sees the
// result.
func checkDots(d string) *SyntaxError {
	if d[0] == '.' || d[len(d)-1] == '.' {
		return errDotPosition
	}
	if strings.Contains(d, "..") {
		return errConsecutiveDot
	}
	return nil
}

// checkLabels checks the labels of a lower-case ASCII domain against the
// host name rules (RFC 1123 LDH labels). It reports whether a label is an
// A-label or longer than 63 octets, and returns the last label; the caller
// checks lengths after the IDNA rules.
func checkLabels(d string) (ace, long bool, tld string, e *SyntaxError) {
	if d == "" {
		return false, false, "", errEmptyDomain
	}
	start := 0 // of the current label
	for i := 0; i <= len(d); i++ {
		if i < len(d) {
			c := d[i]
			if c != '.' {
				if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
					return false, false, "", errBadLabel
				}
				continue
			}
		}
		label := d[start:i]
		switch {
		case label == "":
			if start == 0 || i == len(d) {
				return false, false, "", errDotPosition
			}
			return false, false, "", errConsecutiveDot
		case label[0] == '-' || label[len(label)-1] == '-':
			return false, false, "", errBadLabel
		case len(label) > maxLabel:
			long = true
		}
		if len(label) >= 4 && label[:4] == "xn--" {
			ace = true
		}
		tld = label
		start = i + 1
	}
	return ace, long, tld, nil
}

// checkHyphens rejects labels that start or end with a hyphen in the
// Unicode form of a domain.
func checkHyphens(u string) *SyntaxError {
	for label := range strings.SplitSeq(u, ".") { // SplitSeq: no slice to allocate
		if label != "" && (label[0] == '-' || label[len(label)-1] == '-') {
			return errBadLabel
		}
	}
	return nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
