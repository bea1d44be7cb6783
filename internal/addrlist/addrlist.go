// Package addrlist reads lists of addresses — the first column of a CSV
// file, or the "emails" array of a JSON object — from a stream, with memory
// bounded by what is kept: one address at a time, never a whole record or
// the whole body. A 6 MiB row of commas or a JSON array of a million
// numbers costs a few kilobytes, not hundreds of megabytes, and a 100 MiB
// upload is read as it arrives.
//
// Problems with the list itself are *Error values, whose message is written
// for the client (it names the line or element, never echoes the content);
// errors of the underlying reader are returned as they are.
package addrlist

import (
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Limits bound what a list may hold.
type Limits struct {
	// MaxAddresses is the most addresses the list may hold; reading one
	// more stops with an *Error whose TooMany is true.
	MaxAddresses int
	// MaxAddressBytes is the longest address kept; a longer one is an
	// *Error. Nothing longer is ever buffered.
	MaxAddressBytes int
	// MaxRecordBytes is the longest CSV record (all its fields and line
	// breaks); 0 means DefaultMaxRecordBytes.
	MaxRecordBytes int
}

// DefaultMaxRecordBytes is the longest CSV record accepted by default: far
// beyond a CRM export's widest row, short of a file that is one row.
const DefaultMaxRecordBytes = 1 << 20

// Error is a problem with the list's content.
type Error struct {
	msg string
	// TooMany is set when the list holds more than Limits.MaxAddresses.
	TooMany bool
}

func (e *Error) Error() string { return e.msg }

func errorf(format string, args ...any) *Error { return &Error{msg: fmt.Sprintf(format, args...)} }

// IsTooMany reports whether err is the *Error of a list over its limit.
func IsTooMany(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.TooMany
}

// utf8Reader passes through bytes that are valid UTF-8 and fails with an
// *Error at the first that is not, naming its line. A character split
// between two reads is held back until it is whole.
type utf8Reader struct {
	r     io.Reader
	carry [utf8.UTFMax]byte
	nc    int
	line  int
	what  string // "CSV file", "JSON body"
	err   error
}

func newUTF8Reader(r io.Reader, what string) *utf8Reader {
	return &utf8Reader{r: r, line: 1, what: what}
}

func (u *utf8Reader) Read(p []byte) (int, error) {
	if u.err != nil {
		return 0, u.err
	}
	if len(p) <= utf8.UTFMax {
		// Too small to hold a carried character and progress; callers
		// here read through bufio with large buffers.
		return 0, io.ErrShortBuffer
	}
	copy(p, u.carry[:u.nc])
	n, err := u.r.Read(p[u.nc:])
	n += u.nc
	u.nc = 0
	// Validate p[:n]; a possibly incomplete character at the end is
	// carried to the next read unless the stream ended.
	i := 0
	for i < n {
		c := p[i]
		if c < utf8.RuneSelf {
			if c == '\n' {
				u.line++
			}
			i++
			continue
		}
		if !utf8.FullRune(p[i:n]) && err == nil {
			u.nc = copy(u.carry[:], p[i:n])
			break
		}
		r, size := utf8.DecodeRune(p[i:n])
		if r == utf8.RuneError && size <= 1 {
			u.err = errorf("The %s is not UTF-8 text (line %d); save it as UTF-8 (Excel: \"CSV UTF-8\").", u.what, u.line)
			return i, nil
		}
		i += size
	}
	if u.nc > 0 {
		return n - u.nc, nil
	}
	return n, err
}
