package jsontext_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/jsontext"
)

func checkString(t *testing.T, s string) {
	t.Helper()
	want, _ := json.Marshal(s)
	if got := jsontext.AppendString([]byte("x"), s); string(got) != "x"+string(want) {
		t.Errorf("%q → %s, json.Marshal %s", s, got[1:], want)
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
