// Package jsontext appends JSON text to byte slices without reflection:
// strings escaped exactly as encoding/json or log/slog escape them, and the
// digits of timestamps. The hand-written encoders of the hot replies
// (package api) and the log handler (package jsonlog) share it, and their
// tests hold each against the standard library's output byte for byte.
package jsontext

import (
	"time"
	"unicode/utf8"
)

// Style is whose escaping rules AppendString follows.
type Style int

const (
	// Marshal escapes as json.Marshal does: also '<', '>' and '&' (as
	// \u003c, \u003e, \u0026, safe inside HTML), and \b and \f by name.
	Marshal Style = iota
	// Slog escapes as slog.JSONHandler does: '<', '>' and '&' as they are,
	// \b and \f as \u0008 and \u000c.
	Slog
)

const hexDigits = "0123456789abcdef"

// AppendString appends s as a quoted JSON string in the given style. Both
// styles escape '"', '\\', control characters (\n, \r and \t by name, the
// rest as \u00XX), U+2028 and U+2029 (unsafe inside JavaScript), and write
// each byte of invalid UTF-8 as \ufffd.
func AppendString(b []byte, s string, style Style) []byte {
	b = append(b, '"')
	done := 0 // s[:done] is in b
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (style != Marshal || c != '<' && c != '>' && c != '&') {
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
			case c == '\b' && style == Marshal:
				b = append(b, '\\', 'b')
			case c == '\f' && style == Marshal:
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
