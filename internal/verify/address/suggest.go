package address

import (
	"strings"

	"golang.org/x/net/publicsuffix"
)

// Suggest proposes a correction when an address's domain looks like a typo
// of a well-known mail provider (gmial.com → gmail.com).
//
// A wrong suggestion is worse than none: it nudges a person away from their
// real address. So the matcher is deliberately conservative, more so than
// plain edit distance:
//
//   - a domain that is itself well known, or on the free list, is never
//     corrected;
//   - a misspelt provider label ("gmial") is corrected only for labels of
//     five or more letters: short labels have too many real neighbours
//     (ao.com, aal.com and gmz.com are real domains, not misspelt aol.com or
//     gmx.com);
//   - the label may be one edit away (a transposition counts as one), or two
//     for labels of eight or more letters; six- and seven-letter labels stay
//     at one because real words sit two edits away (oracle/orange,
//     liberty/libero, yankee/yandex);
//   - the first letter must match, or the first two be swapped: a different
//     first letter is a different word more often than a typo (cloud.com is
//     not icloud.com, email.com not gmail.com);
//   - a misspelt suffix is corrected within one edit when the label is
//     exactly a provider's. A suffix that cannot exist (".con", ".cmo",
//     ".comm") is always a typo. One that exists is only corrected when a
//     letter was dropped (".co", ".cm" for ".com") and the label has five or
//     more letters (gmail.co, not aol.co or mail.co): swapping one real
//     country code for another is how providers name regional domains
//     (hotmail.be, outlook.ie, yahoo.se);
//   - label and suffix misspelt together (gmial.con) only when the suffix
//     cannot exist;
//   - when two providers are equally close the input is left alone.

// known holds the provider domains a suggestion may name: the ones people
// most often mistype. Every one is on the free list (a test checks).
// Some big providers are left out on purpose because ordinary names sit
// one edit from their label: naver.com (never.com), t-online.de
// (tv-online.de).
var known = []string{
	"126.com", "163.com", "aim.com", "aol.com", "att.net", "bellsouth.net",
	"btinternet.com", "comcast.net", "cox.net", "free.fr", "gmail.com",
	"gmx.com", "gmx.de", "gmx.net", "googlemail.com", "hotmail.co.uk",
	"hotmail.com", "hotmail.de", "hotmail.es", "hotmail.fr", "hotmail.it",
	"icloud.com", "libero.it", "live.com", "mac.com", "mail.com", "mail.ru",
	"me.com", "msn.com", "orange.fr", "outlook.com",
	"outlook.de", "outlook.fr", "proton.me", "protonmail.com", "qq.com",
	"rocketmail.com", "sbcglobal.net", "tutanota.com",
	"verizon.net", "wanadoo.fr", "web.de", "y7mail.com", "yahoo.co.uk",
	"yahoo.com", "yahoo.de", "yahoo.fr", "yandex.com", "yandex.ru",
	"ymail.com", "zoho.com",
}

// target is a known domain split where the matcher compares it.
type target struct {
	domain, label, rest string
	// maxEdits is maxLabelEdits(label), kept to skip the call per input.
	maxEdits int
}

var targets = func() []target {
	ts := make([]target, len(known))
	for i, d := range known {
		label, rest, _ := strings.Cut(d, ".")
		ts[i] = target{d, label, rest, maxLabelEdits(label)}
	}
	return ts
}()

// byFirst and bySwap index the targets by the letters sameStart compares,
// so that an input is measured only against the few providers it could be
// a typo of: byFirst[c] holds every target whose label starts with c (an
// exact label match always starts with the same letter), bySwap[c] the
// editable targets whose label's second letter is c, for inputs that swap
// the first two letters. Most inputs start with a letter no provider, or
// only a short one, starts with, and cost a table lookup.
var byFirst, bySwap = func() (first, swap [256][]*target) {
	for i := range targets {
		t := &targets[i]
		first[t.label[0]] = append(first[t.label[0]], t)
		if t.maxEdits > 0 {
			swap[t.label[1]] = append(swap[t.label[1]], t)
		}
	}
	return first, swap
}()

// minEditLabel is the shortest provider label that may be reached by
// editing the input's label; see the package comment for why.
const minEditLabel = 5

// twoEditLabel is the shortest provider label that may be two edits from
// the input's label.
const twoEditLabel = 8

// maxLabelEdits is how many edits a misspelt label may be from the
// provider's label.
func maxLabelEdits(label string) int {
	switch {
	case len(label) < minEditLabel:
		return 0
	case len(label) < twoEditLabel:
		return 1
	default:
		return 2
	}
}

// Suggest returns a corrected domain when d looks like a typo of a well-known
// mail domain (gmial.com → gmail.com, gmail.con → gmail.com), else
// ("", false). d must be lower-case ASCII (A-labels), as package address
// produces it.
//
// A domain on the free list is a real mailbox provider and never corrected.
// A disposable domain is: the disposable list holds typo-squats of the big
// providers (gmai.com, outllok.com), and the person who typed one most
// likely meant the provider, so they get the correction as well as the
// disposable verdict.
func Suggest(d string) (string, bool) {
	if Free(d) {
		return "", false
	}
	return SuggestTypo(d, 3)
}

// SuggestTypo is Suggest without consulting the free and disposable lists, and
// without corrections of more than maxEdits edits in label and suffix
// together. The list generator uses it to keep one-edit typo-squats
// (gmial.com) out of the free list, where they would suppress their own
// correction, while less certain matches keep the benefit of the doubt;
// everyone else wants Suggest.
func SuggestTypo(d string, maxEdits int) (string, bool) {
	label, rest, ok := strings.Cut(d, ".")
	if !ok || label == "" || rest == "" {
		return "", false
	}
	m := matcher{d: d, label: label, rest: rest, maxEdits: maxEdits, realSuffix: -1}
	for _, t := range byFirst[label[0]] {
		if t.domain == d {
			return "", false
		}
		m.try(t)
	}
	// Inputs that swap the first two letters ("mgail"). A target whose
	// label starts with a doubled letter is in byFirst as well when the
	// input starts with that letter twice; it must not count twice, or it
	// would tie with itself.
	if len(label) >= 2 && label[0] != label[1] {
		for _, t := range bySwap[label[0]] {
			if t.label[0] == label[1] {
				m.try(t)
			}
		}
	}
	if m.best == "" || m.tie {
		return "", false
	}
	return m.best, true
}

// matcher holds one input's split and the best correction found so far.
// Targets may be tried in any order: the outcome is the lowest score, and
// nothing when two targets share it.
type matcher struct {
	d, label, rest string
	maxEdits       int
	// realSuffix caches isReal: -1 not known yet, 0 no, 1 yes. Computed
	// lazily because most inputs are not near any provider at all.
	realSuffix int

	best      string
	bestScore int
	tie       bool
}

func (m *matcher) isReal() bool {
	if m.realSuffix < 0 {
		m.realSuffix = 0
		if _, icann := publicsuffix.PublicSuffix(m.rest); icann {
			m.realSuffix = 1
		}
	}
	return m.realSuffix == 1
}

// try scores the input against one target that passed the first-letter
// index, applying the rules of the package comment in order of cost:
// the label checks first, the edit distances last.
func (m *matcher) try(t *target) {
	label, rest := m.label, m.rest
	ld := 0
	if label != t.label {
		max := t.maxEdits
		if max == 0 || !sameStart(label, t.label) {
			return
		}
		if gap := len(label) - len(t.label); gap > max || -gap > max {
			return
		}
		if gap := len(rest) - len(t.rest); gap > 1 || gap < -1 {
			return
		}
		if ld = distance(label, t.label, max); ld > max {
			return
		}
	}
	rd := distance(rest, t.rest, 1)
	if rd > 1 {
		return
	}
	if rd == 1 && (ld > 0 || len(t.label) < minEditLabel || len(rest) != len(t.rest)-1) && m.isReal() {
		return
	}
	score := ld + rd
	if score > m.maxEdits {
		return
	}
	switch {
	case m.best == "" || score < m.bestScore:
		m.best, m.bestScore, m.tie = t.domain, score, false
	case score == m.bestScore:
		m.tie = true
	}
}

// sameStart reports whether a misspelling keeps the first letter of the
// label, or only swaps the first two letters.
func sameStart(s, label string) bool {
	if len(s) < 2 {
		return false
	}
	return s[0] == label[0] || s[0] == label[1] && s[1] == label[0]
}

// maxLen bounds the strings distance compares so its rows live on the
// stack; provider labels and suffixes are far shorter.
const maxLen = 24

// distance returns the optimal-string-alignment distance between a and b
// (Levenshtein plus transposition of adjacent bytes, each edit once), or
// max+1 once it is known to exceed max.
func distance(a, b string, max int) int {
	if a == b {
		return 0
	}
	if d := len(a) - len(b); d > max || -d > max || len(a) >= maxLen || len(b) >= maxLen {
		return max + 1
	}
	// uint8 cells: distances stay below maxLen, and the rows the compiler
	// zeroes on every call are a quarter of the size of ints.
	var rows [3][maxLen + 1]uint8
	prev2, prev, cur := &rows[0], &rows[1], &rows[2]
	for j := 0; j <= len(b); j++ {
		prev[j] = uint8(j)
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = uint8(i)
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := uint8(1)
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
		if int(rowMin) > max {
			return max + 1
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return min(int(prev[len(b)]), max+1)
}
