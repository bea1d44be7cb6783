// Package idempotency makes a POST handler safe to retry under an
// Idempotency-Key: the first call with a key runs and its reply is stored
// for 24 h; a later call with the same key and request gets the stored reply
// again, one with another request gets 422, and one while the first still
// runs gets 409.
//
// A Keeper runs in one of two modes, which answer every call alike:
//
//   - Shared (New), for a store many processes use at once (DynamoDB under
//     the Lambda functions): the store arbitrates. A call writes an
//     in-progress claim, runs, then stores its reply on it (or deletes it
//     after a 5xx). A process that dies mid-call leaves its claim, which
//     blocks the key for LockTimeout.
//   - Local (NewLocal), for a store exactly one process serves (`evs serve`,
//     which holds its data directory's serve lock): claims live in the
//     Keeper's memory, and the store sees one lookup and one durable write
//     of the finished reply per call. A crash leaves nothing in progress:
//     a reply the client received was stored before it was sent, and a call
//     cut off mid-way stored nothing, so its retry runs at once.
package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"strings"
	"unicode/utf8"

	"github.com/evs-dev/evs/internal/evs"
)

// MaxKeyLen is the longest Idempotency-Key the contract accepts.
const MaxKeyLen = 255

// ValidKey checks an Idempotency-Key header value: 1 to 255 visible ASCII
// characters (0x21–0x7E). The error never repeats the key, which a client may
// have filled with anything, including a secret.
func ValidKey(key string) error {
	if key == "" {
		return evs.Errorf(evs.CodeInvalidRequest, "The Idempotency-Key header is empty; send 1 to %d visible ASCII characters or leave the header out.", MaxKeyLen)
	}
	if len(key) > MaxKeyLen {
		return evs.Errorf(evs.CodeInvalidRequest, "The Idempotency-Key header is longer than %d characters.", MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return evs.Errorf(evs.CodeInvalidRequest, "The Idempotency-Key header may hold only visible ASCII characters (no spaces or control characters).")
		}
	}
	return nil
}

// Body kinds mixed into a fingerprint, so a raw body can never collide with
// the canonical form of a JSON one.
const (
	kindRaw  = "raw"
	kindJSON = "json"
)

// Fingerprint returns the hex SHA-256 identifying a request: its method,
// path and canonical body. A JSON body (by its Content-Type) is decoded and
// re-encoded with sorted object keys and no insignificant whitespace, so the
// same request sent with other formatting or key order matches; numbers keep
// their literal text (1.0 and 1 differ), as the handler may read them so. Any
// other body, and a JSON body that does not parse as exactly one valid UTF-8
// JSON value, is hashed as sent: a malformed body is answered 400 by the
// handler anyway, and only the exact same bytes should replay that answer.
func Fingerprint(method, path, contentType string, body []byte) string {
	kind, canon := kindRaw, body
	if isJSON(contentType) {
		if c, ok := canonicalJSON(body); ok {
			kind, canon = kindJSON, c
		}
	}
	h := sha256.New()
	// Length-prefixed fields: no choice of method and path can shift bytes
	// from one field into the next and collide.
	for _, f := range [][]byte{[]byte(method), []byte(path), []byte(kind), canon} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write(f)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// isJSON tells whether a Content-Type names JSON: application/json or any
// +json suffix type, with or without parameters.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(contentType))
	}
	return mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

// canonicalJSON re-encodes body: decoded, then encoded with json.Marshal,
// which sorts object keys. Invalid UTF-8 is refused because the decoder
// would replace it with U+FFFD, making different bodies equal.
func canonicalJSON(body []byte) ([]byte, bool) {
	if !utf8.Valid(body) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, false // trailing data: not one JSON value
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	return out, true
}
