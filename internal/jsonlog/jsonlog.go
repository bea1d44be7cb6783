// Package jsonlog is the service's log handler: one JSON object per line,
// exactly what slog.JSONHandler writes, at a fraction of its cost for the
// flat records the service logs on every call (strings, integers,
// booleans, durations). Records it has no fast path for — groups, other
// kinds of values, ReplaceAttr, AddSource — are handed to a
// slog.JSONHandler behind it, so nothing is ever written differently.
//
// Why: `evs serve` writes an access line and a call line per request, and
// slog.JSONHandler spent about a tenth of a /v1/verify call on them.
package jsonlog

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/evs-dev/evs/internal/jsontext"
)

// Handler is a slog.Handler writing JSON lines to one writer.
type Handler struct {
	mu    *sync.Mutex // shared by the handlers derived by WithAttrs and WithGroup
	w     io.Writer
	level slog.Leveler
	// pre holds the attributes added by WithAttrs, encoded, each with its
	// leading comma.
	pre []byte
	// slow is the slog.JSONHandler with the same attributes and groups,
	// for what has no fast path.
	slow slog.Handler
	// fast is false once a group or an attribute without a fast path was
	// added: every record then goes to slow.
	fast bool
}

// New returns a handler writing to w with opts, as slog.NewJSONHandler(w,
// opts) would.
func New(w io.Writer, opts *slog.HandlerOptions) *Handler {
	if opts == nil {
		opts = &slog.HandlerOptions{}
	}
	mu := &sync.Mutex{}
	return &Handler{
		mu:    mu,
		w:     w,
		level: opts.Level,
		slow:  slog.NewJSONHandler(lockedWriter{mu, w}, opts),
		fast:  opts.ReplaceAttr == nil && !opts.AddSource,
	}
}

// lockedWriter makes the slow path's writes take the same lock as the fast
// path's, so lines from both never interleave or race on w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Enabled reports whether level is at or above the handler's minimum (Info
// by default).
func (h *Handler) Enabled(_ context.Context, level slog.Level) bool {
	min := slog.LevelInfo
	if h.level != nil {
		min = h.level.Level()
	}
	return level >= min
}

// WithAttrs returns a handler whose records carry attrs too.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := *h
	h2.slow = h.slow.WithAttrs(attrs)
	if h2.fast {
		pre, ok := appendAttrs(append([]byte(nil), h.pre...), attrs)
		h2.pre, h2.fast = pre, ok
	}
	return &h2
}

// WithGroup returns a handler that nests what follows in the group name;
// such records take the slow path.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	h2 := *h
	h2.slow = h.slow.WithGroup(name)
	h2.fast = false
	return &h2
}

var bufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// Handle writes r as one line.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if !h.fast {
		return h.slow.Handle(ctx, r)
	}
	bp := bufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= 16<<10 {
			bufs.Put(bp)
		}
	}()
	b := append((*bp)[:0], '{')
	if !r.Time.IsZero() {
		t := r.Time.Round(0)
		if y := t.Year(); y < 0 || y >= 10000 {
			return h.slow.Handle(ctx, r) // slog reports the bad year its own way
		}
		b = append(b, `"time":"`...)
		b = appendRFC3339Nano(b, t)
		b = append(b, `",`...)
	}
	b = append(b, `"level":`...)
	b = appendString(b, r.Level.String())
	b = append(b, `,"msg":`...)
	b = appendString(b, r.Message)
	b = append(b, h.pre...)
	ok := true
	r.Attrs(func(a slog.Attr) bool {
		b, ok = appendAttr(b, a)
		return ok
	})
	if !ok {
		return h.slow.Handle(ctx, r)
	}
	b = append(b, '}', '\n')
	*bp = b
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.w.Write(b)
	return err
}

// appendRFC3339Nano appends t as t.AppendFormat(b, time.RFC3339Nano) does
// (years 0–9999), digit by digit: AppendFormat parses its layout on every
// call.
func appendRFC3339Nano(b []byte, t time.Time) []byte {
	_, offset := t.Zone()
	if offset%60 != 0 {
		return t.AppendFormat(b, time.RFC3339Nano) // a zone offset with seconds: rare, and RFC 3339 has no place for them
	}
	b = jsontext.AppendDateTime(b, t)
	if ns := t.Nanosecond(); ns != 0 {
		// Nine digits, trailing zeros dropped, as RFC3339Nano does.
		n := len(b)
		b = jsontext.AppendDigits(append(b, '.'), ns, 9)
		for b[len(b)-1] == '0' && len(b) > n+2 {
			b = b[:len(b)-1]
		}
	}
	if offset == 0 {
		return append(b, 'Z')
	}
	sign := byte('+')
	if offset < 0 {
		sign, offset = '-', -offset
	}
	b = append(b, sign)
	b = jsontext.AppendDigits(b, offset/3600, 2)
	b = append(b, ':')
	return jsontext.AppendDigits(b, offset/60%60, 2)
}

func appendAttrs(b []byte, attrs []slog.Attr) ([]byte, bool) {
	for _, a := range attrs {
		var ok bool
		if b, ok = appendAttr(b, a); !ok {
			return b, false
		}
	}
	return b, true
}

// appendAttr appends ,"key":value for the kinds with a fast path, and
// reports false for anything else (b is then to be dropped).
func appendAttr(b []byte, a slog.Attr) ([]byte, bool) {
	if a.Key == "" {
		return b, false // slog drops or inlines these by rules of its own
	}
	b = append(b, ',')
	b = appendString(b, a.Key)
	b = append(b, ':')
	v := a.Value
	switch v.Kind() {
	case slog.KindString:
		b = appendString(b, v.String())
	case slog.KindInt64:
		b = strconv.AppendInt(b, v.Int64(), 10)
	case slog.KindUint64:
		b = strconv.AppendUint(b, v.Uint64(), 10)
	case slog.KindBool:
		b = strconv.AppendBool(b, v.Bool())
	case slog.KindDuration:
		b = strconv.AppendInt(b, int64(v.Duration()), 10)
	default:
		return b, false
	}
	return b, true
}

// appendString appends s quoted as slog.JSONHandler quotes it.
func appendString(b []byte, s string) []byte {
	return jsontext.AppendString(b, s, jsontext.Slog)
}
