// Package jsontext appends JSON text to byte slices without reflection:
// strings escaped exactly as encoding/json escapes them, and the digits of
// timestamps. The hand-written encoders of the hot replies (package api)
// and the Idempotency-Key fingerprint use it, and their tests hold each
// against encoding/json's output byte for byte. It
// also reads the one shape of JSON hot requests have, a flat object of
// plain strings (ScanFlatObject), for the verify handler and the
// Idempotency-Key fingerprint; fuzz targets hold both readers to
// encoding/json.
package jsontext

import (
	"strings"
	"time"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// AppendString appends s as a quoted JSON string, as json.Marshal writes
// it: '"', '\\', '<', '>', '&' and control characters escaped (\b, \f,
// \n, \r and \t by name, the rest as \u00XX), U+2028 and U+2029 too
// (unsafe inside JavaScript), and each byte of invalid UTF-8 as \ufffd.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	done := 0 // s[:done] is in b
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[done:i]...)
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			done = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[done:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[done:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		done = i
	}
	b = append(b, s[done:]...)
	return append(b, '"')
}

// AppendDigits appends v (0 ≤ v < 10^width, width ≤ 9) as exactly width
// digits.
func AppendDigits(b []byte, v, width int) []byte {
	var d [9]byte
	for i := width - 1; i >= 0; i-- {
		d[i] = byte('0' + v%10)
		v /= 10
	}
	return append(b, d[:width]...)
}

// AppendDateTime appends t's date and clock in its own location as
// 2006-01-02T15:04:05, written digit by digit: time.AppendFormat parses its
// layout on every call. The year must be 0–9999 (RFC 3339); callers check.
func AppendDateTime(b []byte, t time.Time) []byte {
	year, month, day := t.Date()
	hour, minute, sec := t.Clock()
	b = AppendDigits(b, year, 4)
	b = append(b, '-')
	b = AppendDigits(b, int(month), 2)
	b = append(b, '-')
	b = AppendDigits(b, day, 2)
	b = append(b, 'T')
	b = AppendDigits(b, hour, 2)
	b = append(b, ':')
	b = AppendDigits(b, minute, 2)
	b = append(b, ':')
	return AppendDigits(b, sec, 2)
}

// ScanFlatObject reads s as a JSON object whose members are all strings
// without escapes, or null, handing each to member in order (value nil for
// null). It reports false — and the caller decodes s with encoding/json
// instead — for anything else: escapes, numbers, nesting, malformed JSON,
// or a member the caller refuses. value points to a variable reused for
// the next member: member copies what it keeps. So it never accepts what
// encoding/json would refuse, and never reads a value differently; the
// common request costs no reflection. s must be valid UTF-8 (the caller
// checks), and may have JSON whitespace around the object.
func ScanFlatObject(s string, member func(name string, value *string) bool) bool {
	var v string // one variable for every value: member copies what it keeps
	i := skipSpace(s, 0)
	if i >= len(s) || s[i] != '{' {
		return false
	}
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return skipSpace(s, i+1) == len(s)
	}
	for {
		name, next, ok := scanPlainString(s, i)
		if !ok {
			return false
		}
		i = skipSpace(s, next)
		if i >= len(s) || s[i] != ':' {
			return false
		}
		i = skipSpace(s, i+1)
		var value *string
		if strings.HasPrefix(s[i:], "null") {
			i += len("null")
		} else {
			var next int
			var ok bool
			if v, next, ok = scanPlainString(s, i); !ok {
				return false
			}
			value, i = &v, next
		}
		if !member(name, value) {
			return false
		}
		i = skipSpace(s, i)
		if i >= len(s) {
			return false
		}
		switch s[i] {
		case ',':
			i = skipSpace(s, i+1)
		case '}':
			return skipSpace(s, i+1) == len(s)
		default:
			return false
		}
	}
}

// scanPlainString reads the JSON string starting at s[i] when it has no
// escapes and no control characters, returning its content and the index
// after its closing quote.
func scanPlainString(s string, i int) (string, int, bool) {
	if i >= len(s) || s[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			return s[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		}
	}
	return "", 0, false
}

// skipSpace skips JSON whitespace from s[i].
func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}
