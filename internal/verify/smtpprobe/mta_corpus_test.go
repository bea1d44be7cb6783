package smtpprobe_test

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// The second half of the corpus, testdata/mta_replies.tsv, holds the RCPT
// (and MAIL, where an MTA reports it at RCPT) reply templates that the
// common MTAs emit, taken from their source code and documentation rather
// than written by the authors of the rules. Each row gives the template's
// inner text ("text") and the text as that MTA puts it on the wire after the
// reply code and enhanced code ("wrapped"): Postfix's "<addr>: Recipient
// address rejected: ...", Sendmail's "<addr>... ", qmail's trailing
// "(#5.1.1)", Exim's multi-line verify reports joined into one line.

const mtaCorpusFile = "testdata/mta_replies.tsv"

const mtaCorpusHeader = "mta\tcode\tenhanced\ttext\twrapped\texpected\tsource"

// knownMTAs are the software families the corpus draws on.
var knownMTAs = map[string]bool{
	"postfix": true, "exim": true, "sendmail": true, "qmail": true, "mailfront": true,
	"exchange": true, "opensmtpd": true, "dovecot": true, "haraka": true, "courier": true,
}

// mtaRow is one reply template of testdata/mta_replies.tsv.
type mtaRow struct {
	line     int
	mta      string
	code     int
	enhanced string
	text     string
	wrapped  string
	want     smtpprobe.Class
	source   string
}

// wireEnhanced is the enhanced code as it reaches us with the wrapped text:
// qmail and its patches put it at the end ("... (#5.7.1)"), where it is
// part of the text and no enhanced code leads the reply.
func (r mtaRow) wireEnhanced() string {
	if r.enhanced != "" && strings.Contains(r.wrapped, "(#"+r.enhanced) {
		return ""
	}
	return r.enhanced
}

// loadMTACorpus reads the MTA corpus and checks its shape: seven columns,
// a reply code, a known MTA and class, text, wrapped text and a source on
// every row, and no template twice.
func loadMTACorpus(t *testing.T) []mtaRow {
	t.Helper()
	var rows []mtaRow
	for _, rec := range readTSV(t, mtaCorpusFile, mtaCorpusHeader, 1, []int{0, 1, 2, 3, 4}) {
		n, cols := rec.line, rec.cols
		code, _ := strconv.Atoi(cols[1])
		r := mtaRow{line: n, mta: cols[0], code: code, enhanced: cols[2], text: cols[3],
			wrapped: cols[4], want: smtpprobe.Class(cols[5]), source: cols[6]}
		if !knownMTAs[r.mta] {
			t.Fatalf("line %d: unknown mta %q", n, r.mta)
		}
		if !knownClasses[r.want] {
			t.Fatalf("line %d: unknown class %q", n, r.want)
		}
		if e := r.enhanced; e != "" && (len(e) < 5 || e[1] != '.' || (e[0] != '2' && e[0] != '4' && e[0] != '5')) {
			t.Fatalf("line %d: bad enhanced code %q", n, e)
		}
		if r.text == "" || r.wrapped == "" || strings.TrimSpace(r.source) == "" {
			t.Fatalf("line %d: empty text, wrapped or source", n)
		}
		if r.text != strings.TrimSpace(r.text) || r.wrapped != strings.TrimSpace(r.wrapped) {
			t.Fatalf("line %d: text or wrapped has surrounding spaces", n)
		}
		if r.code/100 == 4 && (r.want == smtpprobe.Rejected || r.want == smtpprobe.Blocked) {
			t.Fatalf("line %d: a %d is never %s", n, r.code, r.want)
		}
		rows = append(rows, r)
	}
	if len(rows) < 120 {
		t.Fatalf("MTA corpus has %d rows, want at least 120", len(rows))
	}
	return rows
}

// TestMTACorpusShape checks the corpus file alone, apart from the
// classifier.
func TestMTACorpusShape(t *testing.T) {
	rows := loadMTACorpus(t)
	per := map[string]int{}
	for _, r := range rows {
		per[r.mta]++
	}
	t.Logf("%d rows: %v", len(rows), per)
}

// ambiguousBare returns the rows whose bare form (code, enhanced code,
// inner text) another row shares with a different meaning: Postfix's
// default "Access denied" is about the client, the sender or the recipient
// only by the wrapper around it. Their bare form cannot be judged alone.
func ambiguousBare(rows []mtaRow) map[int]bool {
	classes := map[string]map[smtpprobe.Class]bool{}
	key := func(r mtaRow) string { return fmt.Sprintf("%d\t%s\t%s", r.code, r.enhanced, r.text) }
	for _, r := range rows {
		if classes[key(r)] == nil {
			classes[key(r)] = map[smtpprobe.Class]bool{}
		}
		classes[key(r)][r.want] = true
	}
	amb := map[int]bool{}
	for _, r := range rows {
		if len(classes[key(r)]) > 1 {
			amb[r.line] = true
		}
	}
	return amb
}

// verdict is the status a class leads to in a decision (contract section
// 2): what a user acts on. blocked and unknown both end unknown
// (smtp_unreachable), greylisted and rate_limited both unknown
// (greylisted).
func verdict(c smtpprobe.Class) string {
	switch c {
	case smtpprobe.Accepted:
		return "deliverable"
	case smtpprobe.Rejected:
		return "undeliverable"
	case smtpprobe.Full:
		return "risky"
	}
	return "unknown"
}

// TestMTACorpus reads every template twice at RCPT, as its bare inner text
// and as the MTA wraps it on the wire, and fails on any verdict other than
// the one its source gives it; a class that differs but leads to the same
// verdict (blocked for unknown) is logged. The expectations come from what the MTAs mean,
// not from the classifier; a failing row is a finding about the rules. A
// bare form shared by rows of different meanings is only logged.
//
// With EVS_MTA_MISMATCHES set to a path, the mismatches are also written
// there, one a line.
func TestMTACorpus(t *testing.T) {
	rows := loadMTACorpus(t)
	amb := ambiguousBare(rows)
	type miss struct {
		form string
		r    mtaRow
		got  smtpprobe.Reading
		text string
	}
	var misses []miss
	wrongBare, wrongWrapped := 0, 0
	for _, r := range rows {
		bare := smtpprobe.Read(smtpprobe.StageRcpt, smtpprobe.Reply{Code: r.code, Enhanced: r.enhanced, Text: r.text})
		if amb[r.line] {
			t.Logf("line %d %s: bare %d %s %q is ambiguous (reads %s; this row means %s)", r.line, r.mta, r.code, r.enhanced, r.text, bare.Class, r.want)
		} else if verdict(bare.Class) != verdict(r.want) {
			wrongBare++
			misses = append(misses, miss{"bare", r, bare, r.text})
		} else if bare.Class != r.want {
			t.Logf("line %d %s: bare reads %s, means %s: the same verdict", r.line, r.mta, bare.Class, r.want)
		}
		wire := smtpprobe.Read(smtpprobe.StageRcpt, smtpprobe.Reply{Code: r.code, Enhanced: r.wireEnhanced(), Text: r.wrapped})
		if verdict(wire.Class) != verdict(r.want) {
			wrongWrapped++
			misses = append(misses, miss{"wrapped", r, wire, r.wrapped})
		} else if wire.Class != r.want {
			t.Logf("line %d %s: wrapped reads %s, means %s: the same verdict", r.line, r.mta, wire.Class, r.want)
		}
	}
	sort.SliceStable(misses, func(i, j int) bool { return misses[i].r.line < misses[j].r.line })
	var report strings.Builder
	for _, m := range misses {
		enh := m.r.enhanced
		if m.form == "wrapped" {
			enh = m.r.wireEnhanced()
		}
		line := fmt.Sprintf("line %d %s %s: %d %s %q = %s (rule %s, family %q), want %s [%s]",
			m.r.line, m.r.mta, m.form, m.r.code, enh, m.text, m.got.Class, m.got.Rule, m.got.Family, m.r.want, m.r.source)
		t.Error(line)
		report.WriteString(line + "\n")
	}
	if path := os.Getenv("EVS_MTA_MISMATCHES"); path != "" {
		if err := os.WriteFile(path, []byte(report.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d rows (%d with an ambiguous bare form), %d wrong bare, %d wrong wrapped", len(rows), len(amb), wrongBare, wrongWrapped)
}
