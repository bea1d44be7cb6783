package authorizer_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/authorizer"
)

func TestNewIsWellFormedAndUnique(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		k, err := authorizer.NewKey()
		if err != nil {
			t.Fatal(err)
		}
		if !authorizer.WellFormed(k) {
			t.Fatalf("New() = %q is not well formed", k)
		}
		if seen[k] {
			t.Fatal("duplicate key")
		}
		seen[k] = true
	}
}

func TestWellFormed(t *testing.T) {
	good, _ := authorizer.NewKeyFrom(bytes.NewReader(make([]byte, 32)))
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
		if got := authorizer.WellFormed(tt.key); got != tt.want {
			t.Errorf("WellFormed(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
}

func TestHashAndID(t *testing.T) {
	h := authorizer.HashKey("evs.x")
	if len(h) != 64 || strings.ToLower(h) != h {
		t.Fatalf("Hash = %q", h)
	}
	if authorizer.HashKey("evs.x") != h || authorizer.HashKey("evs.y") == h {
		t.Fatal("hash not deterministic or not distinct")
	}
	if authorizer.KeyID(h) != h[:12] {
		t.Fatal("ID is not the hash prefix")
	}
}
