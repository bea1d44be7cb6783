package smtpprobe_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// corpusRow is one real-world RCPT reply of testdata/rcpt_replies.tsv.
type corpusRow struct {
	line     int
	code     int
	enhanced string
	text     string
	want     smtpprobe.Class
	source   string
	// provider is the provider whose rule the row needs, or "": such a
	// reply means what it does only from that provider's hosts.
	provider smtpprobe.Provider
}

var knownClasses = map[smtpprobe.Class]bool{
	smtpprobe.Accepted: true, smtpprobe.Rejected: true, smtpprobe.Full: true, smtpprobe.Greylisted: true,
	smtpprobe.Blocked: true, smtpprobe.RateLimited: true, smtpprobe.Unknown: true,
}

// tsvRecord is one data line of a corpus file: its line number and cells.
type tsvRecord struct {
	line int
	cols []string
}

// readTSV reads a corpus file whose first line must be header, checks that
// every line has as many cells as the header, that the reply code in cell
// codeCol is one, and that no line repeats the cells keyCols of an earlier
// one, and returns the data lines.
func readTSV(t *testing.T, path, header string, codeCol int, keyCols []int) []tsvRecord {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if lines[0] != header {
		t.Fatalf("%s: header %q, want %q", path, lines[0], header)
	}
	width := strings.Count(header, "\t") + 1
	seen := map[string]int{}
	var out []tsvRecord
	for i, l := range lines[1:] {
		n := i + 2
		cols := strings.Split(l, "\t")
		if len(cols) != width {
			t.Fatalf("%s line %d: %d columns, want %d", path, n, len(cols), width)
		}
		if code, err := strconv.Atoi(cols[codeCol]); err != nil || code < 200 || code > 599 {
			t.Fatalf("%s line %d: bad code %q", path, n, cols[codeCol])
		}
		var key []string
		for _, k := range keyCols {
			key = append(key, cols[k])
		}
		if prev, ok := seen[strings.Join(key, "\t")]; ok {
			t.Fatalf("%s line %d repeats line %d", path, n, prev)
		}
		seen[strings.Join(key, "\t")] = n
		out = append(out, tsvRecord{n, cols})
	}
	return out
}

// loadCorpus reads the corpus and checks its shape: six columns, a known
// class and provider, a source, and no reply twice.
func loadCorpus(t *testing.T) []corpusRow {
	t.Helper()
	var rows []corpusRow
	for _, rec := range readTSV(t, "testdata/rcpt_replies.tsv", "code\tenhanced\ttext\texpected\tsource\tprovider", 0, []int{0, 1, 2}) {
		n, cols := rec.line, rec.cols
		code, _ := strconv.Atoi(cols[0])
		r := corpusRow{line: n, code: code, enhanced: cols[1], text: cols[2], want: smtpprobe.Class(cols[3]), source: cols[4], provider: smtpprobe.Provider(cols[5])}
		if r.provider != "" && r.provider.Info() == nil {
			t.Fatalf("line %d: unknown provider %q", n, r.provider)
		}
		if !knownClasses[r.want] {
			t.Fatalf("line %d: unknown class %q", n, r.want)
		}
		if r.text == "" || r.source == "" {
			t.Fatalf("line %d: empty text or source", n)
		}
		rows = append(rows, r)
	}
	if len(rows) < 200 {
		t.Fatalf("corpus has %d rows, want at least 200", len(rows))
	}
	return rows
}

// TestCorpus runs every real-world reply of the corpus through Classify
// at RCPT and fails on any class other than the expected one.
func TestCorpus(t *testing.T) {
	rows := loadCorpus(t)
	wrong := 0
	for _, r := range rows {
		got := smtpprobe.ReadFrom(smtpprobe.StageRcpt, r.provider, smtpprobe.Reply{Code: r.code, Enhanced: r.enhanced, Text: r.text})
		if got.Class != r.want {
			wrong++
			t.Errorf("line %d: %d %s %q = %s (rule %s, family %q), want %s [%s]", r.line, r.code, r.enhanced, r.text, got.Class, got.Rule, got.Family, r.want, r.source)
		}
	}
	t.Logf("%d rows, %d wrong", len(rows), wrong)
}

// wire renders a corpus row as a multi-line reply of about 60-character
// lines, repeating the enhanced code on every line as Gmail does, so that
// the replay exercises the joining of lines.
func wire(code int, enhanced, text string) string {
	prefix := strconv.Itoa(code)
	if enhanced != "" {
		enhanced += " "
	}
	var lines []string
	var cur strings.Builder
	for _, w := range strings.Fields(text) {
		if cur.Len() > 0 && cur.Len()+len(w) > 60 {
			lines = append(lines, cur.String())
			cur.Reset()
		}
		if cur.Len() > 0 {
			cur.WriteByte(' ')
		}
		cur.WriteString(w)
	}
	lines = append(lines, cur.String())
	var b strings.Builder
	for i, l := range lines {
		sep := "-"
		if i == len(lines)-1 {
			sep = " "
		}
		fmt.Fprintf(&b, "%s%s%s%s\n", prefix, sep, enhanced, l)
	}
	return b.String()
}

// TestCorpusReplay replays a sample of the corpus through a real SMTP
// peer on loopback at RCPT, through the Prober, and checks the class and
// the evidence that comes back.
func TestCorpusReplay(t *testing.T) {
	rows := loadCorpus(t)
	var sample []corpusRow
	for i, r := range rows {
		if r.provider != "" {
			// The loopback peer is no provider's host.
			continue
		}
		if i%4 == 0 || strings.Count(wire(r.code, r.enhanced, r.text), "\n") > 2 && i%2 == 0 {
			sample = append(sample, r)
		}
	}
	byLocal := map[string]corpusRow{}
	for _, r := range sample {
		byLocal["row"+strconv.Itoa(r.line)] = r
	}
	srv := testkit.StartSMTP(t, testkit.SMTPOptions{Rcpt: func(addr string) string {
		local, _, _ := strings.Cut(addr, "@")
		r, ok := byLocal[local]
		if !ok {
			return "550 5.1.1 no such row"
		}
		return wire(r.code, r.enhanced, r.text)
	}})
	p := newProber(t, srv.Port, nil)
	multi := 0
	for _, r := range sample {
		if strings.Count(wire(r.code, r.enhanced, r.text), "\n") > 1 {
			multi++
		}
		// A session per row: a 421 ends its session, as it should.
		s, err := p.Open(context.Background(), "corpus.test", []string{"mx1.test"})
		if err != nil {
			t.Fatal(err)
		}
		reply, class, err := s.Rcpt(context.Background(), fmt.Sprintf("row%d@corpus.test", r.line))
		s.Close()
		if err != nil {
			t.Fatalf("line %d: %v", r.line, err)
		}
		if class != r.want {
			t.Errorf("line %d replayed: %d %s %q = %s, want %s", r.line, reply.Code, reply.Enhanced, reply.Text, class, r.want)
		}
		if reply.Code != r.code || (r.enhanced != "" && reply.Enhanced != r.enhanced) {
			t.Errorf("line %d replayed: code %d %q, want %d %q", r.line, reply.Code, reply.Enhanced, r.code, r.enhanced)
		}
		if utf8.RuneCountInString(reply.Text) > 200 || (r.enhanced != "" && !strings.HasPrefix(strings.Join(strings.Fields(r.text), " "), reply.Text)) {
			t.Errorf("line %d replayed: evidence text %q is not the first 200 characters of %q", r.line, reply.Text, r.text)
		}
	}
	if len(sample) < 50 || multi < 30 {
		t.Fatalf("replayed %d rows, %d of them multi-line: too few to prove anything", len(sample), multi)
	}
	t.Logf("replayed %d rows, %d multi-line", len(sample), multi)
}

// TestClassifyReadsWholeReply: the words that decide can come after the
// 200 characters kept as evidence, on a later line; the class must still
// follow them.
func TestClassifyReadsWholeReply(t *testing.T) {
	filler := "550-5.1.1 This is a long explanation from the receiving server that says nothing\n" +
		"550-5.1.1 at all about whom it concerns, written only to be long enough to push\n" +
		"550-5.1.1 the decisive words past the two hundred characters of evidence kept\n"
	tests := []struct {
		name, reply string
		want        smtpprobe.Class
	}{
		{"dnsbl on the last line beats 5.1.1", filler + "550 5.1.1 because your IP is listed at zen.spamhaus.org\n", smtpprobe.Blocked},
		{"user unknown on the last line of a generic code", strings.ReplaceAll(filler, "5.1.1", "5.0.0") + "550 5.0.0 the user does not exist here\n", smtpprobe.Rejected},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := testkit.StartSMTP(t, testkit.SMTPOptions{Rcpt: func(string) string { return tc.reply }})
			p := newProber(t, srv.Port, nil)
			s, err := p.Open(context.Background(), "whole.test", []string{"mx1.test"})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			r, class, err := s.Rcpt(context.Background(), "a@whole.test")
			if err != nil {
				t.Fatal(err)
			}
			if class != tc.want {
				t.Errorf("class %s, want %s (evidence %q)", class, tc.want, r.Text)
			}
			if utf8.RuneCountInString(r.Text) > 200 || strings.Contains(r.Text, "spamhaus") || strings.Contains(r.Text, "does not exist") {
				t.Errorf("evidence text %q should be the first 200 characters only", r.Text)
			}
		})
	}
}

// TestFamiliesDocumented keeps REPLIES.md in step with the table in code:
// every family appears there with its subject and strength, in table order.
func TestFamiliesDocumented(t *testing.T) {
	doc, err := os.ReadFile("REPLIES.md")
	if err != nil {
		t.Fatal(err)
	}
	last := -1
	for _, f := range smtpprobe.Families() {
		strength := "explicit"
		if f.Weak {
			strength = "weak"
		}
		row := fmt.Sprintf("| `%s` | %s | %s |", f.Name, f.About, strength)
		i := strings.Index(string(doc), row)
		if i < 0 {
			t.Errorf("REPLIES.md lacks the row %q", row)
			continue
		}
		if i < last {
			t.Errorf("REPLIES.md lists %s out of table order", f.Name)
		}
		last = i
		if len(f.Phrases) == 0 {
			t.Errorf("family %s has no phrases", f.Name)
		}
	}
}

// TestProvidersDocumented: every provider of the table has its row in
// REPLIES.md, with its MX suffixes.
func TestProvidersDocumented(t *testing.T) {
	doc, err := os.ReadFile("REPLIES.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range smtpprobe.Providers() {
		row := fmt.Sprintf("| `%s` | %s | %s |", p.ID, p.Name, strings.Join(p.MX, ", "))
		if !strings.Contains(string(doc), row) {
			t.Errorf("REPLIES.md lacks the row %q", row)
		}
		if p.Source == "" {
			t.Errorf("provider %s has no source", p.ID)
		}
	}
}
