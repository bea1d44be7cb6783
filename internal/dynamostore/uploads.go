package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Uploads (contract, section 14): the list goes straight to the input
// bucket, under uploads/<account>/<id>, with a pre-signed PUT; no Lambda
// carries its bytes in. The upload's record is an item of the Batches
// table in partition "~upload#<account>", so another account's upload ID
// reads as missing, and it has no state, so no batch reader sees it. The
// bucket's lifecycle rule removes uploads/ objects after a day; the record
// expires with the URL (TTL).

// uploadPartition is the Batches-table partition of an account's uploads.
func uploadPartition(accountID string) string { return "~upload#" + accountID }

// uploadObject is the S3 key of an upload's list.
func uploadObject(accountID, id string) string { return "uploads/" + accountID + "/" + id }

// Upload record attributes.
const (
	attrContentType = "contentType"
	attrMaxBytes    = "maxBytes"
)

// CreateUpload records u and returns a pre-signed PUT URL of its object,
// valid until u.ExpiresAt, which only takes the Content-Type u was made
// for (it is signed). origin is not used: the URL is S3's.
//
// A pre-signed URL stops working when the credentials that signed it
// expire: the Lambda role's session outlasts UploadTTL, a short-lived
// session of one's own may not.
func (s *Store) CreateUpload(ctx context.Context, u evs.Upload, _ string) (string, error) {
	if err := s.in.ready(); err != nil {
		return "", err
	}
	if s.presign == nil {
		return "", errNoPresigner
	}
	_, err := s.c.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.t.Batches),
		Item: item{
			attrAccountID:   avS(uploadPartition(u.AccountID)),
			attrID:          avS(u.ID),
			attrContentType: avS(u.ContentType),
			attrCreatedAt:   avTime(u.CreatedAt),
			attrMaxBytes:    avN(u.MaxBytes),
			attrExpiresAtMs: avTime(u.ExpiresAt),
			attrExpiresAt:   ttlSeconds(u.ExpiresAt),
		},
		ConditionExpression:      aws.String("attribute_not_exists(#id)"),
		ExpressionAttributeNames: map[string]string{"#id": attrID},
	})
	if isConditionFailed(err) {
		return "", evs.Errorf(evs.CodeInvalidState, "The upload already exists.")
	}
	if err != nil {
		return "", wrapErr("create upload", err)
	}
	req, err := s.presign.PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.in.bucket), Key: aws.String(uploadObject(u.AccountID, u.ID)),
		ContentType: aws.String(u.ContentType),
	}, s3.WithPresignExpires(u.ExpiresAt.Sub(s.now())))
	if err != nil {
		return "", wrapErr("sign upload URL", err)
	}
	return req.URL, nil
}

// UploadOrigin is the origin ("https://bucket.s3.region.amazonaws.com")
// of the URLs CreateUpload makes, for a browser page that PUTs lists to
// them (its Content-Security-Policy must allow it). It signs a URL as
// CreateUpload does, so it agrees with the SDK on virtual-hosted or
// path-style addressing and on the endpoint; nothing is sent.
func (s *Store) UploadOrigin(ctx context.Context) (string, error) {
	if err := s.in.ready(); err != nil {
		return "", err
	}
	if s.presign == nil {
		return "", errNoPresigner
	}
	req, err := s.presign.PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.in.bucket), Key: aws.String(uploadObject("origin", "probe")),
	})
	if err != nil {
		return "", wrapErr("sign upload URL", err)
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		return "", fmt.Errorf("dynamostore: upload URL: %w", err)
	}
	return u.Scheme + "://" + u.Host, nil
}

// OpenUpload reads the upload's record, then streams its object: one
// GetItem and one GetObject whatever the list's size.
func (s *Store) OpenUpload(ctx context.Context, accountID, id string) (evs.Upload, io.ReadCloser, int64, error) {
	it, err := s.get(ctx, s.t.Batches, item{attrAccountID: avS(uploadPartition(accountID)), attrID: avS(id)}, "read upload")
	if err != nil {
		return evs.Upload{}, nil, 0, err
	}
	if it == nil || !evs.Live(getTime(it, attrExpiresAtMs), s.now()) {
		return evs.Upload{}, nil, 0, store.NoUpload()
	}
	u := evs.Upload{
		ID: id, AccountID: accountID, ContentType: getS(it, attrContentType),
		CreatedAt: getTime(it, attrCreatedAt), ExpiresAt: getTime(it, attrExpiresAtMs), MaxBytes: getN(it, attrMaxBytes),
	}
	out, err := s.in.o.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.in.bucket), Key: aws.String(uploadObject(accountID, id))})
	var missing *s3types.NoSuchKey
	if errors.As(err, &missing) || apiCode(err) == "NoSuchKey" {
		return evs.Upload{}, nil, 0, store.NothingUploaded()
	}
	if err != nil {
		return evs.Upload{}, nil, 0, wrapErr("read upload", err)
	}
	size := aws.ToInt64(out.ContentLength)
	return u, out.Body, size, nil
}

// DropUpload deletes the upload's object; the record stays until it
// expires, so a second batch from it still finds the first.
func (s *Store) DropUpload(ctx context.Context, accountID, id string) error {
	_, err := s.in.o.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.in.bucket), Key: aws.String(uploadObject(accountID, id))})
	return wrapErr("delete upload", err)
}
