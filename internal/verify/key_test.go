package verify_test

import (
	"testing"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/verify"
)

// TestOneNormalizedKey: the normalized address is computed once per parse
// and must be the same wherever it is read, since the result cache is keyed
// by it: Inspect's, NormalizedKey's (batch creation) and ItemKey's (the
// batch worker, from the item batch creation kept) all equal
// Address.String().
func TestOneNormalizedKey(t *testing.T) {
	set := append(mixedSet(),
		"  alice@corp.example\t", "Alice@CORP.Example", `"a@b"@corp.example`, ` "a b"@Corp.example `,
		"josé@bücher.example", "user@xn--bcher-kva.example", "a@b@corp.example", "@corp.example",
		"alice@corp.example.", "\talice@", "",
	)
	for _, a := range set {
		in := verify.Inspect(a)
		key, domain, ok := verify.NormalizedKey(a)
		item, itemOK := verify.ItemKey(evs.Item{Email: a, Domain: domain})
		if ok != in.Valid || itemOK != in.Valid {
			t.Fatalf("%q: valid: Inspect %v, NormalizedKey %v, ItemKey %v", a, in.Valid, ok, itemOK)
		}
		want := ""
		if in.Valid {
			want = in.Address.String()
		}
		if in.Normalized != want || key != want || item != want {
			t.Fatalf("%q: Inspect %q, NormalizedKey %q, ItemKey %q, want %q", a, in.Normalized, key, item, want)
		}
		if d := verify.NewSandbox(nil).Verify(t.Context(), in, evs.ModeQuick); in.Valid && d.Normalized != want {
			t.Fatalf("%q: decision's normalized %q, want %q", a, d.Normalized, want)
		}
	}
}

// TestInspectNormalizedFree: an ASCII address already in normal form (the
// common case of every /v1/verify and batch item) costs no allocation for
// its normalized key: it is the address's own text.
func TestInspectNormalizedFree(t *testing.T) {
	for _, email := range []string{"john.smith@corp.example", " john.smith@corp.example\t"} {
		if got := testing.AllocsPerRun(100, func() { sink = verify.Inspect(email) }); got != 0 {
			t.Errorf("Inspect(%q): %v allocations, want 0", email, got)
		}
	}
}
