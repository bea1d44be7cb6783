package store_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

func TestRetiredSecrets(t *testing.T) {
	at := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	list := []evs.RetiredSecret{{Secret: "whsec_b", RetiredAt: at}, {Secret: "whsec_a", RetiredAt: at.Add(-time.Hour)}}
	enc, err := store.EncodeRetired(list)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name           string
		stored, legacy string
		want           []evs.RetiredSecret
	}{
		{"list", enc, "", list},
		{"list wins over a legacy secret", enc, "whsec_old", list},
		{"legacy secret alone", "", "whsec_old", []evs.RetiredSecret{{Secret: "whsec_old", RetiredAt: at}}},
		// SQLite keeps both forms in one column: a plain secret is legacy.
		{"legacy in the list's column", "whsec_old", "whsec_old", []evs.RetiredSecret{{Secret: "whsec_old", RetiredAt: at}}},
		{"none", "", "", nil},
	} {
		got, err := store.DecodeRetired(c.stored, c.legacy, at)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: DecodeRetired = %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	if enc, err := store.EncodeRetired(nil); enc != "" || err != nil {
		t.Errorf("EncodeRetired(nil) = %q, %v; want empty", enc, err)
	}
	if _, err := store.DecodeRetired("[{", "", at); err == nil {
		t.Error("DecodeRetired of a damaged list: no error")
	}
}

func TestMaxAgeMillis(t *testing.T) {
	for _, c := range []struct {
		in       time.Duration
		ms       int64
		readBack time.Duration
	}{
		{0, 0, 0},
		{evs.NoReuse, -1, evs.NoReuse},
		{-time.Hour, -1, evs.NoReuse},
		{90 * time.Second, 90_000, 90 * time.Second},
		{500 * time.Microsecond, 1, time.Millisecond},
		{1500 * time.Microsecond, 1, time.Millisecond},
	} {
		ms := store.MaxAgeMillis(c.in)
		if ms != c.ms || store.MaxAgeOf(ms) != c.readBack {
			t.Errorf("MaxAgeMillis(%v) = %d read back as %v; want %d, %v", c.in, ms, store.MaxAgeOf(ms), c.ms, c.readBack)
		}
	}
}

func TestCheckNewBatch(t *testing.T) {
	ok := evs.Batch{ID: "b", AccountID: "a"}
	items := func(seqs ...int) []evs.Item {
		out := make([]evs.Item, len(seqs))
		for i, s := range seqs {
			out[i] = evs.Item{Seq: s}
		}
		return out
	}
	for _, c := range []struct {
		name  string
		b     evs.Batch
		items []evs.Item
		code  string
	}{
		{"fine", ok, items(0, 2, 1), ""},
		{"no items", ok, nil, ""},
		{"no ID", evs.Batch{AccountID: "a"}, items(0), evs.CodeInvalidRequest},
		{"no account", evs.Batch{ID: "b"}, items(0), evs.CodeInvalidRequest},
		{"negative seq", ok, items(0, -1), evs.CodeInvalidRequest},
		{"seq twice", ok, items(0, 1, 0), evs.CodeInvalidRequest},
	} {
		if got := evs.ErrorCode(store.CheckNewBatch(c.b, c.items)); got != c.code {
			t.Errorf("%s: CheckNewBatch code %q, want %q", c.name, got, c.code)
		}
	}
}
