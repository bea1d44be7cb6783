package idempotency_test

import (
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
)

func TestValidKey(t *testing.T) {
	tests := []struct {
		name string
		key  string
		ok   bool
	}{
		{"empty", "", false},
		{"one char", "a", true},
		{"uuid", "3f2b8c1e-9d4a-4c7e-8f1a-2b3c4d5e6f70", true},
		{"all visible ASCII", visibleASCII(), true},
		{"255 chars", strings.Repeat("k", 255), true},
		{"256 chars", strings.Repeat("k", 256), false},
		{"space inside", "a b", false},
		{"leading space", " ab", false},
		{"tab", "a\tb", false},
		{"newline", "a\nb", false},
		{"NUL", "a\x00b", false},
		{"DEL", "a\x7fb", false},
		{"non-ASCII letter", "clé", false},
		{"Latin-1 byte", "a\xe9b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := idempotency.ValidKey(tt.key)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidKey(%q) = %v, want ok=%v", tt.key, err, tt.ok)
			}
			if err == nil {
				return
			}
			if code := evs.ErrorCode(err); code != evs.CodeInvalidRequest {
				t.Errorf("code %q, want %q", code, evs.CodeInvalidRequest)
			}
			if tt.key != "" && strings.Contains(err.Error(), tt.key) {
				t.Errorf("error %q echoes the key", err)
			}
		})
	}
}

func TestValidKeyNeverEchoes(t *testing.T) {
	// A key that is also a plausible message word must not show up either.
	key := strings.Repeat("secret", 50)
	err := idempotency.ValidKey(key)
	if err == nil || strings.Contains(evs.ErrorMessage(err), "secret") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("ValidKey of an over-long key: %v", err)
	}
}

func visibleASCII() string {
	var b strings.Builder
	for c := byte(0x21); c <= 0x7e; c++ {
		b.WriteByte(c)
	}
	return b.String()
}

func TestFingerprint(t *testing.T) {
	const js = "application/json"
	type req struct{ method, path, ct, body string }
	base := req{"POST", "/v1/verify", js, `{"email":"a@x.example","mode":"full"}`}
	tests := []struct {
		name string
		a, b req
		same bool
	}{
		{"identical", base, base, true},
		{"key order", base, req{"POST", "/v1/verify", js, `{"mode":"full","email":"a@x.example"}`}, true},
		{"whitespace", base, req{"POST", "/v1/verify", js, " {\n\t\"email\" : \"a@x.example\",\r\n \"mode\":\"full\" }\n"}, true},
		{"charset parameter", base, req{"POST", "/v1/verify", "application/json; charset=utf-8", base.body}, true},
		{"content type case", base, req{"POST", "/v1/verify", "Application/JSON", base.body}, true},
		{"+json type", req{"POST", "/p", "application/vnd.evs+json", `{"b":1,"a":2}`}, req{"POST", "/p", js, `{"a":2,"b":1}`}, true},
		{"nested key order", req{"POST", "/p", js, `{"o":{"y":[1,{"q":1,"p":2}],"x":null}}`}, req{"POST", "/p", js, `{"o":{"x":null,"y":[1,{"p":2,"q":1}]}}`}, true},
		{"escaped vs literal string", req{"POST", "/p", js, `{"e":"\u0061@x"}`}, req{"POST", "/p", js, `{"e":"a@x"}`}, true},
		{"different value", base, req{"POST", "/v1/verify", js, `{"email":"b@x.example","mode":"full"}`}, false},
		{"array order matters", req{"POST", "/p", js, `[1,2]`}, req{"POST", "/p", js, `[2,1]`}, false},
		{"number literal kept", req{"POST", "/p", js, `{"n":1}`}, req{"POST", "/p", js, `{"n":1.0}`}, false},
		{"big numbers exact", req{"POST", "/p", js, `{"n":12345678901234567890}`}, req{"POST", "/p", js, `{"n":12345678901234567891}`}, false},
		{"method", base, req{"PUT", "/v1/verify", js, base.body}, false},
		{"path", base, req{"POST", "/v1/requests", js, base.body}, false},
		{"method/path boundary", req{"POST", "/v1", js, "x"}, req{"POST/", "v1", js, "x"}, false},
		{"CSV raw whitespace matters", req{"POST", "/v1/requests", "text/csv", "email\na@x\n"}, req{"POST", "/v1/requests", "text/csv", "email\r\na@x\r\n"}, false},
		{"CSV identical", req{"POST", "/v1/requests", "text/csv", "email\na@x\n"}, req{"POST", "/v1/requests", "text/csv", "email\na@x\n"}, true},
		{"JSON body sent as text is raw", req{"POST", "/p", "text/plain", `{"a":1, "b":2}`}, req{"POST", "/p", "text/plain", `{"b":2,"a":1}`}, false},
		{"raw never equals canonical JSON", req{"POST", "/p", "text/plain", `{"a":1}`}, req{"POST", "/p", js, `{"a":1}`}, false},
		{"malformed JSON hashed raw", req{"POST", "/p", js, `{"a":1,}`}, req{"POST", "/p", js, `{"a":1 ,}`}, false},
		{"trailing data hashed raw", req{"POST", "/p", js, `{"a":1}{}`}, req{"POST", "/p", js, `{"a":1} {}`}, false},
		{"invalid UTF-8 not merged", req{"POST", "/p", js, "{\"a\":\"\xff\"}"}, req{"POST", "/p", js, "{\"a\":\"\xfe\"}"}, false},
		{"empty body", req{"POST", "/p", js, ""}, req{"POST", "/p", js, ""}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fa := idempotency.Fingerprint(tt.a.method, tt.a.path, tt.a.ct, []byte(tt.a.body))
			fb := idempotency.Fingerprint(tt.b.method, tt.b.path, tt.b.ct, []byte(tt.b.body))
			if len(fa) != 64 || strings.Trim(fa, "0123456789abcdef") != "" {
				t.Fatalf("fingerprint %q is not lower-case hex SHA-256", fa)
			}
			if (fa == fb) != tt.same {
				t.Fatalf("same=%v, want %v", fa == fb, tt.same)
			}
		})
	}
}
