package dynamostore

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Presigner makes pre-signed S3 URLs (*s3.PresignClient).
type Presigner interface {
	PresignGetObject(ctx context.Context, in *s3.GetObjectInput, optFns ...func(*s3.PresignOptions)) (*v4.PresignedHTTPRequest, error)
	PresignPutObject(ctx context.Context, in *s3.PutObjectInput, optFns ...func(*s3.PresignOptions)) (*v4.PresignedHTTPRequest, error)
}

var errNoPresigner = errors.New("dynamostore: no S3 pre-signer is configured")

// exportPart is the part size of an export's multipart upload: S3's
// minimum, and all an export holds in memory whatever the list's length.
const exportPart = 8 << 20

// partUpload is an io.Writer onto one S3 object: one PutObject when it fits
// in a part, else a multipart upload.
type partUpload struct {
	ctx                      context.Context
	o                        Objects
	bucket, key, disposition string

	buf   []byte
	id    *string // the multipart upload's ID, once started
	parts []types.CompletedPart
	err   error // the first S3 error; later writes fail with it
}

// Write implements io.Writer.
func (u *partUpload) Write(p []byte) (int, error) {
	if u.err != nil {
		return 0, u.err
	}
	n := len(p)
	for len(p) > 0 {
		if u.buf == nil {
			u.buf = make([]byte, 0, exportPart)
		}
		k := min(len(p), exportPart-len(u.buf))
		u.buf, p = append(u.buf, p[:k]...), p[k:]
		if len(u.buf) == exportPart {
			if err := u.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

// flush uploads the buffer as the next part.
func (u *partUpload) flush() error {
	if u.id == nil {
		out, err := u.o.CreateMultipartUpload(u.ctx, &s3.CreateMultipartUploadInput{
			Bucket: aws.String(u.bucket), Key: aws.String(u.key),
			ContentType: aws.String("text/csv; charset=utf-8"), ContentDisposition: aws.String(u.disposition),
		})
		if err != nil {
			u.err = err
			return err
		}
		u.id = out.UploadId
	}
	n := int32(len(u.parts) + 1)
	out, err := u.o.UploadPart(u.ctx, &s3.UploadPartInput{
		Bucket: aws.String(u.bucket), Key: aws.String(u.key), UploadId: u.id, PartNumber: aws.Int32(n),
		Body: bytes.NewReader(u.buf), ContentLength: aws.Int64(int64(len(u.buf))),
	})
	if err != nil {
		u.err = err
		return err
	}
	u.parts = append(u.parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(n)})
	u.buf = u.buf[:0]
	return nil
}

// finish stores what is left: the whole object, or the last part and the
// upload's completion.
func (u *partUpload) finish() error {
	if u.id == nil {
		_, err := u.o.PutObject(u.ctx, &s3.PutObjectInput{
			Bucket: aws.String(u.bucket), Key: aws.String(u.key), Body: bytes.NewReader(u.buf),
			ContentLength: aws.Int64(int64(len(u.buf))), ContentType: aws.String("text/csv; charset=utf-8"),
			ContentDisposition: aws.String(u.disposition),
		})
		return err
	}
	if len(u.buf) > 0 {
		if err := u.flush(); err != nil {
			return err
		}
	}
	_, err := u.o.CompleteMultipartUpload(u.ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(u.bucket), Key: aws.String(u.key), UploadId: u.id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: u.parts},
	})
	return err
}

// abort drops a multipart upload that will not complete, so its parts are
// not kept (and billed) until the bucket's lifecycle rule would.
func (u *partUpload) abort() {
	if u.id == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), 10*time.Second)
	defer cancel()
	_, _ = u.o.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(u.bucket), Key: aws.String(u.key), UploadId: u.id})
}
