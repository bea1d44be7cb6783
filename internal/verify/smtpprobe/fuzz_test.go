package smtpprobe

import (
	"bufio"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzReply feeds arbitrary bytes to the reply reader and the classifier.
// Whatever a server sends, the reader must not panic, the evidence text
// must stay valid UTF-8 within 200 characters, every class must be one of
// the seven, and text that blames us must never turn a reply into a
// verdict against the mailbox, wherever it sits in the text.
func FuzzReply(f *testing.F) {
	for _, s := range []string{
		"550-5.1.1 The email account that you tried to reach does not exist.\r\n550 5.1.1 gsmtp\r\n",
		"550 5.1.0 192.0.2.1 is not allowed to send from <x> per it's SPF Record\r\n",
		"554 5.7.1 Client host [1.2.3.4] blocked using zen.spamhaus.org\r\n",
		"550 Пользователь не найден\r\n",
		"550 用户不存在\r\n",
		"452 4.2.2 Mailbox full\r\n",
		"250 2.1.5 Ok\r\n",
		"550 \xff\xfe\x00 junk\r\n",
	} {
		f.Add([]byte(s))
	}
	stages := []string{StageBanner, StageEHLO, StageMail, StageRcpt}
	f.Fuzz(func(t *testing.T, data []byte) {
		rr, err := readReply(bufio.NewReaderSize(strings.NewReader(string(data)), maxLineLen))
		if err != nil {
			return
		}
		r := rr.reply()
		if !utf8.ValidString(r.Text) || utf8.RuneCountInString(r.Text) > maxText {
			t.Fatalf("evidence text %q", r.Text)
		}
		whole := rr.whole()
		for _, st := range stages {
			c := Classify(st, whole)
			switch c {
			case Accepted, Rejected, Full, Greylisted, Blocked, RateLimited, Unknown:
			default:
				t.Fatalf("class %q", c)
			}
			if c == Rejected && (st != StageRcpt || whole.Code < 500 || whole.Code > 599) {
				t.Fatalf("%s: %d reply called rejected", st, whole.Code)
			}
			if c == Accepted != (whole.Code/100 == 2) {
				t.Fatalf("%s: %d reply called %s", st, whole.Code, c)
			}
		}
		for _, blame := range []string{"client host blocked using zen.spamhaus.org", "SPF check failed", "sender rejected", "AUP#1234"} {
			texts := []string{blame + " " + whole.Text}
			if len(whole.Text)+len(blame) < maxReadText {
				// Past maxReadText nothing is read: only then may an
				// appended blame go unseen.
				texts = append(texts, whole.Text+" "+blame)
			}
			for _, text := range texts {
				if c := Classify(StageRcpt, Reply{Code: whole.Code, Enhanced: whole.Enhanced, Text: text}); c == Rejected {
					t.Fatalf("%d %s %q called rejected", whole.Code, whole.Enhanced, text)
				}
			}
		}
	})
}
