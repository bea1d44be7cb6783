package idempotency

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// RewriteRequestID returns a copy of a JSON reply body in which the
// top-level "requestId" and "error.requestId" members hold id, the two places
// the contract puts a reply's request id. Everything else is kept byte for
// byte, member order included, so a replay differs from the original only in
// the id. A body that is not one JSON object is returned unchanged.
func RewriteRequestID(body []byte, id string) []byte {
	spans, ok := idSpans(body, false)
	if !ok || len(spans) == 0 {
		return bytes.Clone(body)
	}
	val, _ := json.Marshal(id) // a string always encodes
	out := make([]byte, 0, len(body)+len(spans)*len(val))
	last := 0
	for _, s := range spans {
		out = append(out, body[last:s[0]]...)
		out = append(out, val...)
		last = s[1]
	}
	return append(out, body[last:]...)
}

// idSpans returns the byte ranges of the values of obj's "requestId" members
// and, unless nested, those inside an "error" object member, in order. ok is
// false unless obj is exactly one JSON object.
func idSpans(obj []byte, nested bool) (spans [][2]int, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		name, _ := t.(string)
		afterName := int(dec.InputOffset())
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		end := int(dec.InputOffset())
		start := valueStart(obj, afterName)
		switch {
		case name == "requestId":
			spans = append(spans, [2]int{start, end})
		case name == "error" && !nested && len(raw) > 0 && raw[0] == '{':
			inner, ok := idSpans(obj[start:end], true)
			if !ok {
				return nil, false
			}
			for _, s := range inner {
				spans = append(spans, [2]int{start + s[0], start + s[1]})
			}
		}
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return spans, true
}

// valueStart skips the colon and whitespace after a member name.
func valueStart(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n', ':':
			i++
		default:
			return i
		}
	}
	return i
}
