package replylog

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"time"

	"github.com/evs-dev/evs/internal/idempotency"
)

// A record on disk is a header and a payload:
//
//	header:  payload length (uint32, little endian) | CRC-32C of the payload (uint32)
//	payload: version (1) | state | locked_until ms | expires_at ms | status |
//	         scope | fingerprint | header count | (name | value)* | body
//
// Times are signed varints of Unix milliseconds (the precision the SQLite
// store keeps too); the status and counts are unsigned varints; strings and
// the body are an unsigned varint length and their bytes. The checksum is
// what tells a record from the torn tail a crash mid-write leaves.
const (
	headerLen     = 8
	recordVersion = 1
	// maxPayload bounds a payload's length as read back, so a corrupt
	// length cannot make recovery allocate gigabytes. Replies are far
	// smaller (the API's largest is a batch creation's).
	maxPayload = 16 << 20
)

// States as stored.
const (
	stateDone       = 1
	stateInProgress = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt is a record that does not decode: a torn tail, or damage.
var errCorrupt = errors.New("replylog: corrupt record")

// appendRecord appends rec, header and payload, to b.
func appendRecord(b []byte, rec idempotency.Record) ([]byte, error) {
	var state byte
	switch rec.State {
	case idempotency.Done:
		state = stateDone
	case idempotency.InProgress:
		state = stateInProgress
	default:
		return b, errors.New("replylog: unknown record state " + rec.State)
	}
	start := len(b)
	b = append(b, make([]byte, headerLen)...)
	b = append(b, recordVersion, state)
	b = binary.AppendVarint(b, rec.LockedUntil.UnixMilli())
	b = binary.AppendVarint(b, rec.ExpiresAt.UnixMilli())
	b = binary.AppendUvarint(b, uint64(max(rec.StatusCode, 0)))
	b = appendString(b, rec.Scope)
	b = appendString(b, rec.Fingerprint)
	b = binary.AppendUvarint(b, uint64(len(rec.Headers)))
	// Sorted, so one record always has one encoding.
	var buf [4]string
	names := buf[:0]
	for k := range rec.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		b = appendString(b, k)
		b = appendString(b, rec.Headers[k])
	}
	b = appendString(b, rec.Body)
	payload := b[start+headerLen:]
	if len(payload) > maxPayload {
		return b[:start], errors.New("replylog: record too large")
	}
	binary.LittleEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	return b, nil
}

func appendString[T string | []byte](b []byte, s T) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// parseHeader returns the payload length and checksum of a header, or
// errCorrupt for one no record has (a zero or oversized length).
func parseHeader(h []byte) (n int, sum uint32, err error) {
	l := binary.LittleEndian.Uint32(h)
	if l == 0 || l > maxPayload {
		return 0, 0, errCorrupt
	}
	return int(l), binary.LittleEndian.Uint32(h[4:]), nil
}

// decodePayload checks payload against sum and decodes it. The record's
// strings are copies; its Body aliases payload.
func decodePayload(payload []byte, sum uint32) (idempotency.Record, error) {
	if crc32.Checksum(payload, castagnoli) != sum {
		return idempotency.Record{}, errCorrupt
	}
	d := decoder{b: payload}
	var rec idempotency.Record
	if d.byte() != recordVersion {
		return rec, errCorrupt
	}
	switch d.byte() {
	case stateDone:
		rec.State = idempotency.Done
	case stateInProgress:
		rec.State = idempotency.InProgress
	default:
		return rec, errCorrupt
	}
	rec.LockedUntil = time.UnixMilli(d.varint()).UTC()
	rec.ExpiresAt = time.UnixMilli(d.varint()).UTC()
	status := d.uvarint()
	if status > 999 {
		d.bad = true
	}
	rec.StatusCode = int(status)
	rec.Scope = string(d.bytes())
	rec.Fingerprint = string(d.bytes())
	n := d.uvarint()
	if n > uint64(len(d.b)) { // each header takes at least two bytes
		return rec, errCorrupt
	}
	if n > 0 {
		rec.Headers = make(map[string]string, n)
		for range n {
			k := string(d.bytes())
			rec.Headers[k] = string(d.bytes())
		}
	}
	rec.Body = d.bytes()
	if len(rec.Body) == 0 && rec.State == idempotency.InProgress {
		rec.Body = nil // as the SQLite store returns a claim: no reply yet
	}
	if d.bad || len(d.b) != 0 {
		return idempotency.Record{}, errCorrupt
	}
	return rec, nil
}

// decoder reads a payload; any read past its end or malformed varint sets
// bad, and later reads return zero values.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) byte() byte {
	if d.bad || len(d.b) == 0 {
		d.bad = true
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.bad {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

// varint reads what binary.AppendVarint wrote: a zigzag-encoded uvarint.
func (d *decoder) varint() int64 {
	u := d.uvarint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.bad || n > uint64(len(d.b)) {
		d.bad = true
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}
