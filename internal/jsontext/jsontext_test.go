package jsontext_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/jsontext"
)

// slogQuoted is how slog.JSONHandler writes s as a value.
func slogQuoted(s string) string {
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key != "v" {
			return slog.Attr{}
		}
		return a
	}})).Info("", "v", s)
	out := strings.TrimSuffix(buf.String(), "\n")
	return strings.TrimSuffix(strings.TrimPrefix(out, `{"v":`), "}")
}

func checkString(t *testing.T, s string) {
	t.Helper()
	want, _ := json.Marshal(s)
	if got := jsontext.AppendString([]byte("x"), s, jsontext.Marshal); string(got) != "x"+string(want) {
		t.Errorf("Marshal style: %q → %s, json.Marshal %s", s, got[1:], want)
	}
	if got, want := string(jsontext.AppendString(nil, s, jsontext.Slog)), slogQuoted(s); got != want {
		t.Errorf("Slog style: %q → %s, slog.JSONHandler %s", s, got, want)
	}
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", "a\"b\\c<d>&e", "\u2028\u2029", "\x00\x01\x1f\b\f\n\r\t\x7f", "\xff\xfe", "é日本", "\xe2\x80"} {
		checkString(t, s)
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("a<b>&\u2028\xff\b")
	f.Fuzz(checkString)
}

func TestAppendDateTime(t *testing.T) {
	for _, tt := range []time.Time{
		time.Date(2026, 11, 23, 16, 5, 9, 0, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("x", -3600)),
	} {
		if got, want := string(jsontext.AppendDateTime(nil, tt)), tt.Format("2006-01-02T15:04:05"); got != want {
			t.Errorf("AppendDateTime(%v) = %s, want %s", tt, got, want)
		}
	}
}
