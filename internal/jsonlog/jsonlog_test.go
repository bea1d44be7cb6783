package jsonlog_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/jsonlog"
)

// both logs the same calls through jsonlog and slog.JSONHandler and
// returns both outputs.
func both(t testing.TB, opts *slog.HandlerOptions, log func(l *slog.Logger)) (got, want string) {
	t.Helper()
	var a, b bytes.Buffer
	log(slog.New(jsonlog.New(&a, opts)))
	log(slog.New(slog.NewJSONHandler(&b, opts)))
	return a.String(), b.String()
}

var at = time.Date(2026, 11, 23, 16, 20, 1, 123456789, time.FixedZone("CET", 3600))

// record logs a record with a fixed time (Logger methods would read the
// clock, and two runs would differ).
func record(l *slog.Logger, level slog.Level, msg string, attrs ...slog.Attr) {
	h := l.Handler()
	if !h.Enabled(context.Background(), level) {
		return
	}
	r := slog.NewRecord(at, level, msg, 0)
	r.AddAttrs(attrs...)
	_ = h.Handle(context.Background(), r)
}

func TestSameLinesAsJSONHandler(t *testing.T) {
	odd := "a\"b\\c<d>&e\u2028f\u2029g\x00\x1f\b\f\n\r\t\x7f h\xff\xfei é 日本"
	tests := []struct {
		name string
		opts *slog.HandlerOptions
		log  func(l *slog.Logger)
	}{
		{"access line", nil, func(l *slog.Logger) {
			record(l, slog.LevelInfo, "access", slog.String("requestId", "4b1c"), slog.String("method", "POST"),
				slog.String("route", "/v1/verify"), slog.Int("status", 200), slog.Int64("latencyMs", 3), slog.String("accountId", "acct"))
		}},
		{"escapes everywhere", nil, func(l *slog.Logger) {
			record(l, slog.LevelWarn, odd, slog.String(odd, odd), slog.Bool("b", true), slog.Uint64("u", 1<<63),
				slog.Int("neg", -7), slog.Duration("d", 1500*time.Millisecond))
		}},
		{"levels", &slog.HandlerOptions{Level: slog.LevelDebug}, func(l *slog.Logger) {
			for _, lv := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError, slog.LevelInfo + 2, slog.LevelDebug - 1} {
				record(l, lv, "m")
			}
		}},
		{"below the level", &slog.HandlerOptions{Level: slog.LevelWarn}, func(l *slog.Logger) {
			record(l, slog.LevelInfo, "dropped")
			record(l, slog.LevelError, "kept")
		}},
		{"with attrs", nil, func(l *slog.Logger) {
			l2 := l.With("fn", "worker", "n", 3).With(slog.Bool("cold", false))
			record(l2, slog.LevelInfo, "call", slog.String("x", "y"))
			record(l, slog.LevelInfo, "parent untouched")
		}},
		{"slow kinds", nil, func(l *slog.Logger) {
			record(l, slog.LevelError, "err", slog.Any("error", errors.New("boom")), slog.Float64("f", 0.1),
				slog.Time("t", at), slog.Any("m", map[string]int{"a": 1}), slog.String("after", "slow"))
		}},
		{"groups", nil, func(l *slog.Logger) {
			record(l, slog.LevelInfo, "g", slog.Group("req", slog.String("id", "1"), slog.Int("n", 2)))
			record(l.WithGroup("w"), slog.LevelInfo, "in group", slog.String("k", "v"))
			record(l.WithGroup("w").With("a", 1), slog.LevelInfo, "in group with", slog.String("k", "v"))
		}},
		{"empty keys and groups", nil, func(l *slog.Logger) {
			record(l, slog.LevelInfo, "e", slog.String("", "no key"), slog.Group("empty"), slog.Attr{})
			record(l.With(slog.Attr{}), slog.LevelInfo, "with nothing")
			record(l.WithGroup(""), slog.LevelInfo, "unnamed group")
		}},
		{"no time", nil, func(l *slog.Logger) {
			_ = l.Handler().Handle(context.Background(), slog.NewRecord(time.Time{}, slog.LevelInfo, "timeless", 0))
		}},
		{"replace attr", &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}, func(l *slog.Logger) { record(l, slog.LevelInfo, "replaced", slog.String("k", "v")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, want := both(t, tt.opts, tt.log)
			if got != want {
				t.Fatalf("jsonlog wrote\n%s\nslog.JSONHandler wrote\n%s", got, want)
			}
		})
	}
}

func FuzzSameLinesAsJSONHandler(f *testing.F) {
	f.Add("call", "requestId", "\xff<&>\u2028", int64(-1), true, int64(1763914801123456789), 3600)
	f.Add("", "", "", int64(0), false, int64(0), -34200)
	f.Fuzz(func(t *testing.T, msg, key, val string, n int64, flag bool, unixNano int64, offset int) {
		// Years 1678–2262, in zones up to ±24 h, with seconds now and then.
		when := time.Unix(0, unixNano).In(time.FixedZone("z", offset%(24*3600)))
		got, want := both(t, nil, func(l *slog.Logger) {
			h := l.With(key, val).Handler()
			r := slog.NewRecord(when, slog.LevelInfo, msg, 0)
			r.AddAttrs(slog.String(key, val), slog.Int64("n", n), slog.Bool("b", flag))
			_ = h.Handle(context.Background(), r)
		})
		if got != want {
			t.Fatalf("jsonlog wrote\n%s\nslog.JSONHandler wrote\n%s", got, want)
		}
	})
}

// Lines written at once from many goroutines, on both paths, come out
// whole.
func TestConcurrentLinesStayWhole(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(jsonlog.New(&buf, nil))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if i%2 == 0 {
					l.Info("fast", "g", g, "i", i)
				} else {
					l.Info("slow", "g", g, slog.Group("x", "i", i))
				}
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 1600 {
		t.Fatalf("%d lines, want 1600", len(lines))
	}
	for _, line := range lines {
		if !strings.HasPrefix(line, `{"time":"`) || !strings.HasSuffix(line, "}") {
			t.Fatalf("broken line %q", line)
		}
	}
}

func BenchmarkAccessLine(b *testing.B) {
	for _, h := range []struct {
		name string
		h    slog.Handler
	}{{"jsonlog", jsonlog.New(discard{}, nil)}, {"slog.JSONHandler", slog.NewJSONHandler(discard{}, nil)}} {
		b.Run(h.name, func(b *testing.B) {
			l := slog.New(h.h)
			b.ReportAllocs()
			for b.Loop() {
				record(l, slog.LevelInfo, "access", slog.String("requestId", "0f3e0d4c-1a5b-4f7e-9b0a-2c6d8e1f3a5b"), slog.String("method", "POST"),
					slog.String("route", "/v1/verify"), slog.Int("status", 200), slog.Int64("latencyMs", 3), slog.String("accountId", "acct_8c1d2e3f"))
			}
		})
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
