package replylog

import (
	"hash/crc32"
	"reflect"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/idempotency"
)

// FuzzDecodePayload: any bytes with a matching checksum either decode or
// are refused as corrupt, never a panic; what decodes encodes back to a
// record that decodes the same.
func FuzzDecodePayload(f *testing.F) {
	rec := idempotency.Record{Scope: "a\x00POST /v1/verify\x00k", Fingerprint: "fp", State: idempotency.Done,
		LockedUntil: time.UnixMilli(1), ExpiresAt: time.UnixMilli(2), StatusCode: 200,
		Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"x":1}`)}
	b, _ := appendRecord(nil, rec)
	f.Add(b[headerLen:])
	f.Add([]byte{recordVersion, stateInProgress, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{recordVersion, 9})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, payload []byte) {
		got, err := decodePayload(payload, crc32.Checksum(payload, castagnoli))
		if err != nil {
			return
		}
		b, err := appendRecord(nil, got)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", got, err)
		}
		n, sum, err := parseHeader(b)
		if err != nil || n != len(b)-headerLen {
			t.Fatalf("header of the re-encoded record: %d, %v", n, err)
		}
		again, err := decodePayload(b[headerLen:], sum)
		if err != nil || !reflect.DeepEqual(again, got) {
			t.Fatalf("re-encoded %+v decodes as %+v, %v", got, again, err)
		}
	})
}

// FuzzRecordRoundTrip: a record built from any fields decodes as it was
// encoded (times in milliseconds).
func FuzzRecordRoundTrip(f *testing.F) {
	f.Add("scope", "fp", true, int64(1), int64(2), 200, "Content-Type", "application/json", []byte("body"))
	f.Add("", "", false, int64(-5), int64(1<<50), 0, "", "", []byte(nil))
	f.Fuzz(func(t *testing.T, scope, fp string, finished bool, locked, expires int64, status int, hk, hv string, body []byte) {
		rec := idempotency.Record{Scope: scope, Fingerprint: fp, State: idempotency.InProgress,
			LockedUntil: time.UnixMilli(locked % (1 << 50)).UTC(), ExpiresAt: time.UnixMilli(expires % (1 << 50)).UTC(),
			StatusCode: status%900 + 100}
		if rec.StatusCode < 100 {
			rec.StatusCode += 900
		}
		if finished {
			rec.State = idempotency.Done
			rec.Headers = map[string]string{hk: hv}
			rec.Body = append([]byte{}, body...)
		}
		b, err := appendRecord(nil, rec)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		n, sum, err := parseHeader(b)
		if err != nil || n != len(b)-headerLen {
			t.Fatalf("header: %d, %v", n, err)
		}
		got, err := decodePayload(b[headerLen:], sum)
		if err != nil || !reflect.DeepEqual(got, rec) {
			t.Fatalf("%+v decodes as %+v, %v", rec, got, err)
		}
	})
}
