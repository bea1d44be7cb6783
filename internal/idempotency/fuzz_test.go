package idempotency_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/evs-dev/evs/internal/idempotency"
)

// FuzzFingerprint checks that a fingerprint depends on a JSON body's meaning,
// not its layout: re-indenting or compacting a valid body keeps it, and it
// is always 64 hex characters.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{
		`{"email":"a@x.example","mode":"full"}`,
		`{"b":[1,2,{"d":null,"c":true}],"a":"\u00e9"}`,
		`[1.0, 1e3, -0, 12345678901234567890]`,
		`"x"`, ``, `{`, "email\na@x\n", `{"a":1}{"b":2}`,
		`{"requestId":"r","error":{"requestId":"e","code":"x"}}`,
	} {
		f.Add("application/json", []byte(s))
	}
	f.Add("text/csv", []byte("email\r\nb@y\r\n"))
	f.Fuzz(func(t *testing.T, ct string, body []byte) {
		fp := idempotency.Fingerprint("POST", "/v1/verify", ct, body)
		if len(fp) != 64 {
			t.Fatalf("fingerprint length %d", len(fp))
		}
		if fp != idempotency.Fingerprint("POST", "/v1/verify", ct, body) {
			t.Fatal("fingerprint not deterministic")
		}
		if !json.Valid(body) || !utf8.Valid(body) {
			// Invalid UTF-8 is hashed raw on purpose (see Fingerprint).
			return
		}
		var compact, indented bytes.Buffer
		if err := json.Compact(&compact, body); err != nil {
			t.Fatal(err)
		}
		if err := json.Indent(&indented, body, " ", "\t"); err != nil {
			t.Fatal(err)
		}
		for _, alt := range [][]byte{compact.Bytes(), indented.Bytes()} {
			a := idempotency.Fingerprint("POST", "/v1/verify", "application/json", alt)
			b := idempotency.Fingerprint("POST", "/v1/verify", "application/json", body)
			if a != b {
				t.Fatalf("layout changed the fingerprint: %q vs %q", body, alt)
			}
		}
	})
}
