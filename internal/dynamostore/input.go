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
// Items are in plan order: by domain, then seq. The planner reads windows
// of the object in turn, so a domain's addresses of an unsorted list come
// to it together and share a session, instead of one per window they sit
// in. An "evs1" object, written before, is in seq order, also a plan
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

// encodeInput returns the object of items, in plan order.
func encodeInput(items []evs.Item) []byte {
	items = slices.Clone(items)
	slices.SortFunc(items, func(a, b evs.Item) int { return cmp.Or(strings.Compare(a.Domain, b.Domain), a.Seq-b.Seq) })
	var buf bytes.Buffer
	buf.Grow(len(items) * 40)
	var index []byte
	var tmp [binary.MaxVarintLen64]byte
	putString := func(s string) {
		buf.Write(tmp[:binary.PutUvarint(tmp[:], uint64(len(s)))])
		buf.WriteString(s)
	}
	for i, it := range items {
		if i%inputChunk == 0 {
			index = binary.LittleEndian.AppendUint64(index, uint64(buf.Len()))
			index = binary.LittleEndian.AppendUint64(index, uint64(i))
		}
		buf.Write(tmp[:binary.PutUvarint(tmp[:], uint64(it.Seq))])
		putString(it.Email)
		putString(it.Domain)
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

// inputIndex is an input object's index: where each chunk starts; it has
// one more entry, the index's own offset, so chunk i is
// offsets[i]:offsets[i+1].
type inputIndex struct {
	offsets []int64
}

func (x inputIndex) chunks() int { return len(x.offsets) - 1 }

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

// put stores the input object under key.
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
	in    inputs
	key   string
	index inputIndex
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
	x := inputIndex{}
	for i := int64(0); i < chunks; i++ {
		x.offsets = append(x.offsets, int64(binary.LittleEndian.Uint64(raw[i*indexEntry:])))
	}
	x.offsets = append(x.offsets, size-need)
	return &inputReader{in: in, key: key, index: x, tail: tail, tailAt: tailAt}, nil
}

// chunks returns the items of chunks [from, to), read with one GET unless
// they lie in the bytes open already read.
func (r *inputReader) chunks(ctx context.Context, from, to int) ([]evs.Item, error) {
	a, z := r.index.offsets[from], r.index.offsets[to]
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
