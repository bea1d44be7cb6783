package api

import (
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// The lists of addresses a batch is created from are read from a stream,
// with memory bounded by one address at a time, never a whole record or
// body. Problems with the list itself are *listError values, written for
// the client (naming the line or element, never echoing the content).

// ListLimits bound what a list may hold.
type ListLimits struct {
	// MaxAddresses is the most addresses the list may hold; reading one
	// more stops with a *listError whose TooMany is true.
	MaxAddresses int
	// MaxAddressBytes is the longest address kept; a longer one is a
	// *listError. Nothing longer is ever buffered.
	MaxAddressBytes int
	// MaxRecordBytes is the longest CSV record (all its fields and line
	// breaks); 0 means defaultMaxRecordBytes.
	MaxRecordBytes int
}

// defaultMaxRecordBytes is the longest CSV record accepted by default: far
// beyond a CRM export's widest row, short of a file that is one row.
const defaultMaxRecordBytes = 1 << 20

// listError is a problem with the list's content.
type listError struct {
	msg string
	// TooMany is set when the list holds more than ListLimits.MaxAddresses.
	TooMany bool
}

func (e *listError) Error() string { return e.msg }

func listErrorf(format string, args ...any) *listError {
	return &listError{msg: fmt.Sprintf(format, args...)}
}

// isTooMany reports whether err is the *listError of a list over its limit.
func isTooMany(err error) bool {
	e, ok := errors.AsType[*listError](err)
	return ok && e.TooMany
}

// utf8Reader passes through bytes that are valid UTF-8 and fails with a
// *listError at the first that is not, naming its line. A character split
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
			u.err = listErrorf("The %s is not UTF-8 text (line %d); save it as UTF-8 (Excel: \"CSV UTF-8\").", u.what, u.line)
			return i, nil
		}
		i += size
	}
	if u.nc > 0 {
		return n - u.nc, nil
	}
	return n, err
}
