package smtpprobe_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// postfixSkip says why a corpus row cannot go into a Postfix access map as
// "CODE ENHANCED TEXT", or "" when it can.
func postfixSkip(r corpusRow) string {
	switch {
	case r.code < 400:
		// An access map value with a 2xx or 3xx code is not an action:
		// Postfix logs "unknown smtpd restriction" and answers
		// "451 4.3.5 Server configuration error" instead.
		return "2xx/3xx: an access map can only refuse"
	case strings.TrimSpace(r.text) != r.text || strings.ContainsAny(r.text, "\r\n"):
		// texthash trims a value and a line break ends it.
		return "text with leading or trailing space or a line break"
	}
	return ""
}

// leadingDSN matches an enhanced status code at the start of a text.
var leadingDSN = regexp.MustCompile(`^([245])\.(\d{1,3})\.(\d{1,3}) +`)

// postfixDSN is the enhanced code and text Postfix 3.7 sends (after
// "<rcpt>: Recipient address rejected: ") for an access map value
// "CODE [ENHANCED] TEXT", as observed and as smtpd_check.c and
// smtpd_dsn_fix.c say:
//   - no enhanced code: one at the start of the text is taken as it;
//     otherwise Postfix adds X.7.1;
//   - the code's class wins: "450 5.1.1" is sent as 450 4.1.1;
//   - in recipient context a mailbox-address DSN (X.1.Y) about the sender
//     is turned into the recipient one (X.1.7 into X.1.3, X.1.8 into
//     X.1.2), and one Postfix does not know (X.1.10) into X.1.0.
func postfixDSN(code int, enhanced, text string) (string, string) {
	class := strconv.Itoa(code / 100)
	if enhanced == "" {
		if m := leadingDSN.FindStringSubmatch(text); m != nil {
			enhanced = m[1] + "." + m[2] + "." + m[3]
			text = text[len(m[0]):]
		} else {
			enhanced = class + ".7.1"
		}
	}
	parts := strings.SplitN(enhanced, ".", 3)
	if parts[1] == "1" {
		switch parts[2] {
		case "1", "2", "3", "4", "5", "6":
		case "7":
			parts[2] = "3"
		case "8":
			parts[2] = "2"
		default:
			parts[2] = "0"
		}
	}
	return class + "." + parts[1] + "." + parts[2], text
}

// postfixMismatch is a corpus row whose reply, as a real Postfix sends it,
// is classed other than the row says.
type postfixMismatch struct {
	row   corpusRow
	reply smtpprobe.Reply
	got   smtpprobe.Class
}

// TestCorpusThroughPostfix puts every corpus row that Postfix can carry
// into a real Postfix's recipient access map, as
// "rowN@corpus.test CODE ENHANCED TEXT", and probes each address through
// the Prober. What comes back is what a Postfix site that refuses with
// that text really sends: "<rowN@corpus.test>: Recipient address
// rejected: TEXT", with the enhanced code Postfix makes of the row's
// (postfixDSN). The class must still be the row's.
func TestCorpusThroughPostfix(t *testing.T) {
	rows := loadCorpus(t)
	access := map[string]string{}
	var replay []corpusRow
	skipped := map[string]int{}
	for _, r := range rows {
		if r.provider != "" {
			// A provider's rule holds only where that provider answers;
			// behind a Postfix front it is Postfix that answers.
			skipped["a provider's own rule"]++
			continue
		}
		if why := postfixSkip(r); why != "" {
			skipped[why]++
			continue
		}
		v := strconv.Itoa(r.code)
		if r.enhanced != "" {
			v += " " + r.enhanced
		}
		access[fmt.Sprintf("row%d@corpus.test", r.line)] = v + " " + r.text
		replay = append(replay, r)
	}
	n := 0
	for why, k := range skipped {
		t.Logf("skipped %d rows: %s", k, why)
		n += k
	}
	if len(replay) < 250 {
		t.Fatalf("only %d of %d rows can be replayed through Postfix (%d skipped): too few to prove anything", len(replay), len(rows), n)
	}

	pf := testkit.StartPostfix(t, testkit.PostfixOptions{
		IP:              "127.0.0.1",
		Domains:         []string{"corpus.test"},
		RecipientAccess: access,
	})
	p := newProber(t, pf.Port, nil)
	ctx := context.Background()
	var s *smtpprobe.Session
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	open := func() {
		if s != nil {
			s.Close()
		}
		var err error
		if s, err = p.Open(ctx, "corpus.test", []string{"mx1.test"}); err != nil {
			t.Fatalf("open a session with Postfix: %v", err)
		}
	}
	open()

	replies := map[int]smtpprobe.Reply{}
	var mismatches []postfixMismatch
	sessions := 1
	for _, r := range replay {
		addr := fmt.Sprintf("row%d@corpus.test", r.line)
		reply, class, err := s.Rcpt(ctx, addr)
		if err != nil {
			// The session broke (Postfix hung up): once more on a new one.
			open()
			sessions++
			if reply, class, err = s.Rcpt(ctx, addr); err != nil {
				t.Fatalf("line %d: %v", r.line, err)
			}
		}
		if reply.Code == 421 {
			// Postfix closes the connection after a 421, and so does the
			// session.
			open()
			sessions++
		}
		replies[r.line] = reply
		// The reply is Postfix's wrapping of the row, nothing else.
		wantEnh, wantText := postfixDSN(r.code, r.enhanced, r.text)
		prefix := "<" + addr + ">: Recipient address rejected: "
		if reply.Code != r.code || reply.Enhanced != wantEnh || !strings.HasPrefix(prefix+wantText, reply.Text) {
			t.Errorf("line %d: Postfix sent %d %s %q for %d %s %q, want %d %s %q", r.line, reply.Code, reply.Enhanced, reply.Text,
				r.code, r.enhanced, r.text, r.code, wantEnh, prefix+wantText)
		}
		// Graded by verdict, as the MTA corpus is: blocked and unknown
		// both end unknown.
		if verdict(class) != verdict(r.want) {
			mismatches = append(mismatches, postfixMismatch{r, reply, class})
		} else if class != r.want {
			t.Logf("line %d through Postfix reads %s, the row %s: the same verdict", r.line, class, r.want)
		}
	}

	// What Postfix made of a few rows, for the record (the Prober keeps
	// at most 200 characters of the text).
	for _, rec := range []struct {
		line     int
		code     int
		enhanced string
		text     string
	}{
		// Gmail's NoSuchUser, wrapped.
		{2, 550, "5.1.1", "<row2@corpus.test>: Recipient address rejected: The email account that you tried to reach does not exist. Please try double-checking the recipient's email address for typos or unnecessary spaces. For"},
		// A 421 is sent as a 421, wrapped, and Postfix hangs up.
		{12, 421, "4.3.0", "<row12@corpus.test>: Recipient address rejected: Temporary System Problem. Try again later. - gsmtp"},
		// A sender DSN in a recipient access map becomes the recipient
		// one: 5.1.7 (bad sender address syntax) is sent as 5.1.3.
		{25, 553, "5.1.3", "<row25@corpus.test>: Recipient address rejected: The sender address <verify@probe.test> is not a valid RFC 5321 address. - gsmtp"},
		// No DSN in the row: Postfix adds 5.7.1.
		{39, 554, "5.7.1", "<row39@corpus.test>: Recipient address rejected: delivery error: dd Requested mail action aborted - mta4011.mail.bf1.yahoo.com"},
		// No DSN in the row but one at the start of its text: Postfix
		// takes it as the DSN.
		{281, 550, "5.1.0", "<row281@corpus.test>: Recipient address rejected: - Unknown address error 550-'No Such User Here' (delivery attempts: 0)"},
	} {
		if got := replies[rec.line]; got.Code != rec.code || got.Enhanced != rec.enhanced || got.Text != rec.text {
			t.Errorf("line %d: Postfix sent %d %s %q, want %d %s %q", rec.line, got.Code, got.Enhanced, got.Text, rec.code, rec.enhanced, rec.text)
		}
	}

	for _, m := range mismatches {
		t.Errorf("line %d: %d %s %q through Postfix = %s, want %s [row: %d %s %q; %s]",
			m.row.line, m.reply.Code, m.reply.Enhanced, m.reply.Text, m.got, m.row.want, m.row.code, m.row.enhanced, m.row.text, m.row.source)
	}
	t.Logf("replayed %d of %d rows through Postfix (%s) in %d sessions; %d skipped; %d with another verdict than the row's",
		len(replay), len(rows), pf.Banner, sessions, n, len(mismatches))
}
