package api

import (
	"testing"
)

// The reflection-free reader of the verify request must agree with the
// strict decoder on every body it accepts: same fields, same values, and
// never accept a body the decoder refuses.
func FuzzVerifyRequestScan(f *testing.F) {
	for _, s := range []string{
		`{"email":"alice@example.com","mode":"quick"}`,
		` { "email" : "a@b.c" , "mode" : null } `,
		`{"email":"a@b.c","email":"d@e.f"}`,
		`{"email":"a@b.c","email":null}`,
		`{}`, `{ }`, `{"Email":"a@b.c"}`, `{"email":"a\"b"}`, `{"email":1}`, `{"email":"x"}x`,
		`{"email":"x",}`, `{"email":"x"`, `{"email" "x"}`, `{"x":"y"}`, "{\"email\":\"\x01\"}",
		`{"email":nul}`, `{"email":nullx}`, `{"email":"日本@例え.jp"}`, "\u00a0{\"email\":\"a\"}\v",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var fast verifyRequest
		if !fast.scan(raw) {
			return
		}
		var strict verifyRequest
		if err := decodeStrict(raw, &strict); err != nil {
			t.Fatalf("scan accepted %q, which the strict decoder refuses: %v", raw, err)
		}
		if !samePtr(fast.Email, strict.Email) || !samePtr(fast.Mode, strict.Mode) {
			t.Fatalf("scan read %q as %s/%s, the decoder as %s/%s", raw, show(fast.Email), show(fast.Mode), show(strict.Email), show(strict.Mode))
		}
	})
}

func TestVerifyRequestScan(t *testing.T) {
	tests := []struct {
		body        string
		ok          bool
		email, mode string // "<nil>" for absent or null
	}{
		{`{"email":"alice@example.com","mode":"quick"}`, true, "alice@example.com", "quick"},
		{" \n{ \"email\" :\t\"a@b.c\" }\r\n", true, "a@b.c", "<nil>"},
		{`{"email":"a@b.c","mode":null}`, true, "a@b.c", "<nil>"},
		{`{"email":"a@b.c","email":"d@e.f"}`, true, "d@e.f", "<nil>"},
		{`{}`, true, "<nil>", "<nil>"},
		{`{"Email":"a@b.c"}`, false, "", ""},      // case-insensitive match: the decoder's call
		{`{"email":"a\u0040b.c"}`, false, "", ""}, // escapes: the decoder's call
		{`{"email":"a@b.c","x":"1"}`, false, "", ""},
		{`{"email":1}`, false, "", ""},
		{`{"email":"a@b.c"} {}`, false, "", ""},
		{`{"email":"a@b.c",}`, false, "", ""},
		{"{\"email\":\"a\xffb\"}", false, "", ""},
	}
	for _, tt := range tests {
		var in verifyRequest
		ok := in.scan([]byte(tt.body))
		if ok != tt.ok {
			t.Errorf("scan(%q) = %v, want %v", tt.body, ok, tt.ok)
			continue
		}
		if ok && (show(in.Email) != tt.email || show(in.Mode) != tt.mode) {
			t.Errorf("scan(%q) read %s/%s, want %s/%s", tt.body, show(in.Email), show(in.Mode), tt.email, tt.mode)
		}
	}
}

func samePtr(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func show(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}
