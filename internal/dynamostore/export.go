package dynamostore

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/evs-dev/evs/internal/evs"
)

// Presigner makes pre-signed S3 URLs (*s3.PresignClient).
type Presigner interface {
	PresignGetObject(ctx context.Context, in *s3.GetObjectInput, optFns ...func(*s3.PresignOptions)) (*v4.PresignedHTTPRequest, error)
	PresignPutObject(ctx context.Context, in *s3.PutObjectInput, optFns ...func(*s3.PresignOptions)) (*v4.PresignedHTTPRequest, error)
}

var errNoPresigner = errors.New("dynamostore: no S3 pre-signer is configured")

// Export stores a batch's CSV result list in the input bucket, under
// exports/, and returns a pre-signed GET URL for it (api.Exports): Lambda
// cannot return a reply over 6 MB, S3 can hand out any size, and a browser
// can fetch the URL without the API key. origin is not used: the URL is
// S3's.
func (s *Store) Export(ctx context.Context, accountID, batchID, _ string, csv []byte) (string, time.Time, error) {
	if err := s.in.ready(); err != nil {
		return "", time.Time{}, err
	}
	if s.presign == nil {
		return "", time.Time{}, errNoPresigner
	}
	key := "exports/" + accountID + "/" + batchID + "/" + newToken() + ".csv"
	_, err := s.in.o.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.in.bucket), Key: aws.String(key), Body: bytes.NewReader(csv),
		ContentLength: aws.Int64(int64(len(csv))), ContentType: aws.String("text/csv; charset=utf-8"),
		ContentDisposition: aws.String(`attachment; filename="` + batchID + `.csv"`),
	})
	if err != nil {
		return "", time.Time{}, wrapErr("store export", err)
	}
	// The bucket's lifecycle rule removes the file after a day.
	expires := time.Now().Add(evs.ExportTTL)
	req, err := s.presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.in.bucket), Key: aws.String(key)},
		s3.WithPresignExpires(evs.ExportTTL))
	if err != nil {
		return "", time.Time{}, wrapErr("sign export URL", err)
	}
	return req.URL, expires.UTC(), nil
}
