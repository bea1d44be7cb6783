package idempotency

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

var canonicalSeeds = []string{
	`{"email":"alice@example.com","mode":"quick"}`,
	` { "mode" : null , "email" : "a@b.c" } `,
	`{"b":"<&>","a":"日本","c":"\u2028 x"}`,
	"{\"z\":\"\u2028\u2029\",\"y\":\"a\tb\"}",
	`{"email":"a@b.c","email":"d@e.f"}`,
	`{}`, ` {} `, `{"a":"1","b":"2","c":"3","d":"4","e":"5","f":"6","g":"7","h":"8","i":"9"}`,
	`{"a":1}`, `{"a":"\n"}`, `{"a":"x"}{}`, `{"a":"x",}`, `{"a":[]}`, `[]`, `"x"`, ``,
}

// The fast canonical form must be byte for byte what decoding and
// json.Marshal give, for every body it takes.
func FuzzCanonicalFlat(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) {
			return
		}
		fast, ok := canonicalFlat(body)
		if !ok {
			return
		}
		slow, ok := canonicalDecoded(body)
		if !ok {
			t.Fatalf("canonicalFlat took %q, which does not decode", body)
		}
		if !bytes.Equal(fast, slow) {
			t.Fatalf("canonical form of %q: fast %s, decoded %s", body, fast, slow)
		}
	})
}

func TestCanonicalFlat(t *testing.T) {
	tests := []struct {
		body string
		want string // "" when the fast path must decline
	}{
		{` { "mode" : null , "email" : "a@b.c" } `, `{"email":"a@b.c","mode":null}`},
		{`{"b":"<&>","a":"x"}`, `{"a":"x","b":"\u003c\u0026\u003e"}`},
		{`{}`, `{}`},
		{`{"a":"1","a":"2"}`, ""},
		{`{"a":1}`, ""},
		{`{"a":"\u0041"}`, ""},
		{`{"a":"1","b":"2","c":"3","d":"4","e":"5","f":"6","g":"7","h":"8","i":"9"}`, ""},
	}
	for _, tt := range tests {
		got, ok := canonicalFlat([]byte(tt.body))
		if ok != (tt.want != "") || string(got) != tt.want {
			t.Errorf("canonicalFlat(%q) = %q, %v; want %q", tt.body, got, ok, tt.want)
		}
		if ok {
			slow, _ := canonicalDecoded([]byte(tt.body))
			if string(slow) != tt.want {
				t.Errorf("canonicalDecoded(%q) = %q, the table says %q", tt.body, slow, tt.want)
			}
		}
	}
}
