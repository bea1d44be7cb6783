package dynamostore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/evs-dev/evs/internal/evs"
)

// A batch's input, its distinct items, is one S3 object written before the
// batch record, so a creation costs a few calls whatever its size.
//
// The object is chunks of inputChunk items followed by an index:
//
//	chunk*   each item: uvarint seq, uvarint len, email, uvarint len, domain
//	index    per chunk: uint64 offset, uint64 position of its first item
//	footer   uint32 chunks, uint32 items, "evs2"
//
// Items are in plan order (planOrder): a domain's addresses together, so
// those of an unsorted list come to the planner, which reads windows of
// the object in turn, in one window and share a session, instead of one
// per window they sit in. An "evs1" object, written before, is in seq order, also a plan
// order (its index holds first seqs, which are positions too: seqs are
// dense). The position of an item is its index in the object, so one
// ranged GET reads the chunk that holds a position.

// Objects is the part of the S3 API the store uses for inputs, uploads
// and exports.
type Objects interface {
	PutObject(ctx context.Context, in *s3.PutObjectInput, optFns ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	GetObject(ctx context.Context, in *s3.GetObjectInput, optFns ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, optFns ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
	// The multipart upload of an export of any length (export.go).
	CreateMultipartUpload(ctx context.Context, in *s3.CreateMultipartUploadInput, optFns ...func(*s3.Options)) (*s3.CreateMultipartUploadOutput, error)
	UploadPart(ctx context.Context, in *s3.UploadPartInput, optFns ...func(*s3.Options)) (*s3.UploadPartOutput, error)
	CompleteMultipartUpload(ctx context.Context, in *s3.CompleteMultipartUploadInput, optFns ...func(*s3.Options)) (*s3.CompleteMultipartUploadOutput, error)
	AbortMultipartUpload(ctx context.Context, in *s3.AbortMultipartUploadInput, optFns ...func(*s3.Options)) (*s3.AbortMultipartUploadOutput, error)
}

const (
	inputChunk = 1000 // items per chunk: about 30 KB, half a plan window
	// inputTail is how many bytes at the object's end are read first: the
	// index of up to 4,000 chunks (4M items), and all of a small object.
	inputTail   = 64 << 10
	inputMagic  = "evs2"
	inputMagic1 = "evs1" // seq order, read still
	footerBytes = 12
	indexEntry  = 16
)

// planOrder returns items in the order the planner reads them, as packs
// of one domain or several (one slice of items underneath). Each
// domain's addresses, in seq order, are cut into packs of evs.PackSize; a
// domain of more than one pack is a stream of its packs, and the domains
// of one pack share one stream, in domain order. The packs of every stream
// are spread evenly over the order (the j-th of n at (j+½)/n), so every
// window the planner reads holds each stream's share: a large provider's
// lane, which runs at its RCPT budget for hours, always has work, and
// never holds back the rest of the batch behind it, as whole domains in
// a row would (the planner waits for half a window to finish).
func planOrder(items []evs.Item) [][]evs.Item {
	items = slices.Clone(items)
	// Addresses without a domain (invalid ones, decided without the
	// network) go last.
	last := func(d string) string { return cmp.Or(d, "\xff") } // after any UTF-8
	slices.SortFunc(items, func(a, b evs.Item) int {
		return cmp.Or(strings.Compare(last(a.Domain), last(b.Domain)), a.Seq-b.Seq)
	})
	type pack struct {
		items []evs.Item
		rank  float64
	}
	var packs, single []pack
	for rest := items; len(rest) > 0; {
		n := 1
		for n < len(rest) && rest[n].Domain == rest[0].Domain {
			n++
		}
		dom := rest[:n]
		rest = rest[n:]
		if n <= evs.PackSize {
			single = append(single, pack{items: dom})
			continue
		}
		k := (n + evs.PackSize - 1) / evs.PackSize
		for j := range k {
			packs = append(packs, pack{items: dom[j*evs.PackSize : min((j+1)*evs.PackSize, n)], rank: (float64(j) + 0.5) / float64(k)})
		}
	}
	for j := range single {
		single[j].rank = (float64(j) + 0.5) / float64(len(single))
	}
	packs = append(packs, single...)
	slices.SortStableFunc(packs, func(a, b pack) int { return cmp.Compare(a.rank, b.rank) })
	out := make([][]evs.Item, len(packs))
	for i, p := range packs {
		out[i] = p.items
	}
	return out
}

// encodeInput returns the object of items, in plan order.
func encodeInput(items []evs.Item) []byte {
	var buf bytes.Buffer
	buf.Grow(len(items) * 40)
	var index []byte
	var tmp [binary.MaxVarintLen64]byte
	putString := func(s string) {
		buf.Write(tmp[:binary.PutUvarint(tmp[:], uint64(len(s)))])
		buf.WriteString(s)
	}
	i := 0
	for _, p := range planOrder(items) {
		for _, it := range p {
			if i%inputChunk == 0 {
				index = binary.LittleEndian.AppendUint64(index, uint64(buf.Len()))
				index = binary.LittleEndian.AppendUint64(index, uint64(i))
			}
			i++
			buf.Write(tmp[:binary.PutUvarint(tmp[:], uint64(it.Seq))])
			putString(it.Email)
			putString(it.Domain)
		}
	}
	buf.Write(index)
	chunks := uint32(len(index) / indexEntry)
	buf.Write(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, chunks), uint32(len(items))))
	buf.WriteString(inputMagic)
	return buf.Bytes()
}

// decodeChunk appends the items encoded in b to out.
func decodeChunk(b []byte, out []evs.Item) ([]evs.Item, error) {
	bad := errors.New("dynamostore: corrupt batch input")
	str := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return "", false
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, true
	}
	for len(b) > 0 {
		seq, k := binary.Uvarint(b)
		if k <= 0 {
			return out, bad
		}
		b = b[k:]
		email, ok1 := str()
		domain, ok2 := str()
		if !ok1 || !ok2 {
			return out, bad
		}
		out = append(out, evs.Item{Seq: int(seq), Email: email, Domain: domain})
	}
	return out, nil
}

// inputs reads and writes batch input objects.
type inputs struct {
	o      Objects
	bucket string
}

func (in inputs) ready() error {
	if in.o == nil || in.bucket == "" {
		return errors.New("dynamostore: no input bucket is configured (EVS_INPUT_BUCKET)")
	}
	return nil
}

func (in inputs) put(ctx context.Context, key string, items []evs.Item) error {
	if err := in.ready(); err != nil {
		return err
	}
	body := encodeInput(items)
	_, err := in.o.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(in.bucket), Key: aws.String(key),
		Body: bytes.NewReader(body), ContentLength: aws.Int64(int64(len(body))),
		ContentType: aws.String("application/octet-stream"),
	})
	return wrapErr("store batch input", err)
}

// get reads bytes [from, to) of the object, or its last -from bytes when
// to is 0 and from is negative.
func (in inputs) get(ctx context.Context, key string, from, to int64) ([]byte, int64, error) {
	if err := in.ready(); err != nil {
		return nil, 0, err
	}
	rng := fmt.Sprintf("bytes=%d-%d", from, to-1)
	if to == 0 {
		rng = fmt.Sprintf("bytes=%d", from)
	}
	out, err := in.o.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(in.bucket), Key: aws.String(key), Range: aws.String(rng)})
	if err != nil {
		return nil, 0, wrapErr("read batch input", err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, 0, wrapErr("read batch input", err)
	}
	size := int64(len(b))
	if out.ContentRange != nil {
		// "bytes a-b/size"
		var a, z int64
		if _, err := fmt.Sscanf(*out.ContentRange, "bytes %d-%d/%d", &a, &z, &size); err != nil {
			return nil, 0, wrapErr("read batch input", fmt.Errorf("content range %q: %w", *out.ContentRange, err))
		}
	}
	return b, size, nil
}

// reader reads one input object: its index once, then chunks.
type inputReader struct {
	in  inputs
	key string
	// offsets is where each chunk starts, and then where the index
	// does, so chunk i is offsets[i]:offsets[i+1].
	offsets []int64
	// tail is the object's last bytes as first read, and tailAt where they
	// start: chunks inside it need no other GET.
	tail   []byte
	tailAt int64
}

// open reads the object's index with one GET of its last inputTail bytes
// (more only for an index longer than that).
func (in inputs) open(ctx context.Context, key string) (*inputReader, error) {
	tail, size, err := in.get(ctx, key, -inputTail, 0)
	if err != nil {
		return nil, err
	}
	bad := evs.Wrap(fmt.Errorf("dynamostore: batch input %s is corrupt", key), evs.CodeInternal, "An internal error occurred.")
	if len(tail) < footerBytes || (string(tail[len(tail)-4:]) != inputMagic && string(tail[len(tail)-4:]) != inputMagic1) {
		return nil, bad
	}
	chunks := int64(binary.LittleEndian.Uint32(tail[len(tail)-footerBytes:]))
	need := chunks*indexEntry + footerBytes
	tailAt := size - int64(len(tail))
	if need > size {
		return nil, bad
	}
	if need > int64(len(tail)) {
		if tail, _, err = in.get(ctx, key, size-need, size); err != nil {
			return nil, err
		}
		tailAt = size - need
	}
	raw := tail[int64(len(tail))-need : int64(len(tail))-footerBytes]
	offsets := make([]int64, chunks+1)
	for i := range chunks {
		offsets[i] = int64(binary.LittleEndian.Uint64(raw[i*indexEntry:]))
	}
	offsets[chunks] = size - need
	return &inputReader{in: in, key: key, offsets: offsets, tail: tail, tailAt: tailAt}, nil
}

// chunks returns the items of chunks [from, to), read with one GET unless
// they lie in the bytes open already read.
func (r *inputReader) chunks(ctx context.Context, from, to int) ([]evs.Item, error) {
	a, z := r.offsets[from], r.offsets[to]
	var b []byte
	if a >= r.tailAt {
		b = r.tail[a-r.tailAt : z-r.tailAt]
	} else {
		var err error
		if b, _, err = r.in.get(ctx, r.key, a, z); err != nil {
			return nil, err
		}
	}
	out, err := decodeChunk(b, make([]evs.Item, 0, (to-from)*inputChunk))
	if err != nil {
		return nil, evs.Wrap(fmt.Errorf("%w: %s", err, r.key), evs.CodeInternal, "An internal error occurred.")
	}
	return out, nil
}
