package apikey_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/apikey"
)

func TestNewIsWellFormedAndUnique(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		k, err := apikey.New()
		if err != nil {
			t.Fatal(err)
		}
		if !apikey.WellFormed(k) {
			t.Fatalf("New() = %q is not well formed", k)
		}
		if seen[k] {
			t.Fatal("duplicate key")
		}
		seen[k] = true
	}
}

func TestWellFormed(t *testing.T) {
	good, _ := apikey.NewFrom(bytes.NewReader(make([]byte, 32)))
	tests := []struct {
		key  string
		want bool
	}{
		{good, true},
		{"", false},
		{"evs.", false},
		{"xyz." + good[4:], false},
		{good[:len(good)-1], false},
		{good + "A", false},
		{"evs." + strings.Repeat("A", 42) + "B", false}, // non-zero padding bits
		{"evs." + strings.Repeat("A", 42) + "=", false},
		{"evs." + strings.Repeat("+", 43), false},
	}
	for _, tt := range tests {
		if got := apikey.WellFormed(tt.key); got != tt.want {
			t.Errorf("WellFormed(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
}

func TestHashAndID(t *testing.T) {
	h := apikey.Hash("evs.x")
	if len(h) != 64 || strings.ToLower(h) != h {
		t.Fatalf("Hash = %q", h)
	}
	if apikey.Hash("evs.x") != h || apikey.Hash("evs.y") == h {
		t.Fatal("hash not deterministic or not distinct")
	}
	if apikey.ID(h) != h[:12] {
		t.Fatal("ID is not the hash prefix")
	}
}
