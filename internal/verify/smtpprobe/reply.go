package smtpprobe

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// maxLineLen bounds one reply line. RFC 5321 allows 512 octets; the
	// slack tolerates chatty servers while a hostile one cannot make us
	// buffer without end.
	maxLineLen = 4096
	// maxLines bounds the lines of one reply (an EHLO reply has a dozen).
	maxLines = 100
	// maxText is the length, in characters, Reply.Text is trimmed to.
	maxText = 200
)

// enhancedRe finds an RFC 3463 status code at the start of a line.
var enhancedRe = regexp.MustCompile(`^([245])\.(\d{1,3})\.(\d{1,3})(\s|$)`)

// errMalformed marks a reply that is not SMTP: the peer is not a mail
// server we can talk to.
var errMalformed = errors.New("malformed SMTP reply")

// rawReply is a reply as read: its code and each line's text after the
// code and separator. The EHLO keywords live in lines[1:].
type rawReply struct {
	code  int
	lines []string
}

// readReply reads one reply, multi-line ("250-...") replies included.
func readReply(r *bufio.Reader) (rawReply, error) {
	var rr rawReply
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return rawReply{}, fmt.Errorf("%w: line longer than %d bytes", errMalformed, r.Size())
		}
		if err != nil {
			return rawReply{}, err
		}
		code, text, more, err := parseLine(line)
		if err != nil {
			return rawReply{}, err
		}
		switch {
		case rr.code == 0:
			rr.code = code
		case rr.code == 220 && code >= 400:
			// A greeting's "220-" lines that end in a refusal ("554 5.7.1
			// ... blocked"): the refusal is the reply, its code and text
			// the evidence; the greeting's lines only named the host.
			rr.code, rr.lines = code, nil
		case code != rr.code:
			return rawReply{}, fmt.Errorf("%w: code changed from %d to %d within a reply", errMalformed, rr.code, code)
		}
		rr.lines = append(rr.lines, text)
		if !more {
			return rr, nil
		}
		if len(rr.lines) >= maxLines {
			return rawReply{}, fmt.Errorf("%w: more than %d lines", errMalformed, maxLines)
		}
	}
}

// parseLine splits "250-text\r\n" into its code, text and whether more
// lines follow.
func parseLine(line []byte) (code int, text string, more bool, err error) {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) < 3 {
		return 0, "", false, fmt.Errorf("%w: short line %q", errMalformed, line)
	}
	for _, c := range line[:3] {
		if c < '0' || c > '9' {
			return 0, "", false, fmt.Errorf("%w: no reply code in %q", errMalformed, clip(line))
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code > 599 {
		return 0, "", false, fmt.Errorf("%w: reply code %d out of range", errMalformed, code)
	}
	rest := line[3:]
	if len(rest) > 0 {
		switch rest[0] {
		case '-':
			more = true
		case ' ':
		default:
			return 0, "", false, fmt.Errorf("%w: bad separator in %q", errMalformed, clip(line))
		}
		rest = rest[1:]
	}
	return code, string(rest), more, nil
}

func clip(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}

// reply turns a raw reply into a Reply: the enhanced code comes from the
// first line, and each line loses it (Gmail repeats it on every line).
// Text is trimmed to maxText characters for evidence.
func (rr rawReply) reply() Reply {
	r := rr.whole()
	r.Text = cleanText(r.Text, maxText)
	return r
}

// read reads the whole reply, every line of it, at stage from a host of
// provider p, and returns the Reply with its text trimmed for evidence,
// and the reading. The text that decides can sit past the first 200
// characters (a DNSBL named on the fourth line), so the reading is never
// taken from the trimmed text.
func (rr rawReply) read(stage string, p Provider) (Reply, Reading) {
	r := rr.whole()
	rd := ReadFrom(stage, p, r)
	r.Text = cleanText(r.Text, maxText)
	return r, rd
}

// whole joins the reply's lines into one Reply whose Text is cleaned and
// bounded by maxReadText, not trimmed.
func (rr rawReply) whole() Reply {
	r := Reply{Code: rr.code}
	if len(rr.lines) == 0 {
		return r
	}
	if m := enhancedRe.FindStringSubmatch(rr.lines[0]); m != nil {
		r.Enhanced = m[1] + "." + m[2] + "." + m[3]
	}
	var b strings.Builder
	for _, l := range rr.lines {
		l = strings.TrimSpace(l)
		if r.Enhanced != "" {
			if rest, ok := strings.CutPrefix(l, r.Enhanced); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
				l = strings.TrimSpace(rest)
			}
		}
		if l == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(l)
		if b.Len() > maxReadText {
			break
		}
	}
	r.Text = cleanText(b.String(), maxReadText)
	return r
}

// cleanText makes remote text safe to store and show: valid UTF-8, no
// control characters, at most max characters.
func cleanText(s string, max int) string {
	var b strings.Builder
	n := 0
	for _, c := range s {
		if n == max {
			break
		}
		switch {
		case c == utf8.RuneError:
			c = '?'
		case unicode.IsControl(c):
			c = ' '
		}
		b.WriteRune(c)
		n++
	}
	return strings.TrimSpace(b.String())
}
