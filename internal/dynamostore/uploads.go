package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Uploads: the list goes straight to the input bucket, under
// uploads/<account>/<id>, with a pre-signed PUT; no Lambda carries its
// bytes. The record is a Batches item in partition "~upload#<account>", so
// another account's upload ID reads as missing, and it has no state, so no
// batch reader sees it. The bucket removes uploads/ objects after a day; the
// record expires with the URL.
//
// The cap on open uploads counts the account's unexpired records not marked
// used (attrUsedAt) with a consistent Query of the partition. Counting then
// putting is two steps, so creations take turns under a create lock in that
// partition, as in active.go. The lock item has no attrExpiresAtMs, so the
// count never sees it.

// uploadPartition is the Batches-table partition of an account's uploads.
func uploadPartition(accountID string) string { return "~upload#" + accountID }

// uploadObject is the S3 key of an upload's list.
func uploadObject(accountID, id string) string { return "uploads/" + accountID + "/" + id }

// Upload record attributes.
const (
	attrContentType = "contentType"
	attrMaxBytes    = "maxBytes"
	attrUsedAt      = "usedAt" // a batch was made from it: no longer open
)

// CreateUpload records u and returns a pre-signed PUT URL of its object,
// valid until u.ExpiresAt, which only takes the Content-Type u was made
// for (it is signed). origin is not used: the URL is S3's.
//
// A pre-signed URL stops working when the credentials that signed it
// expire: the Lambda role's session outlasts UploadTTL, a short-lived
// session of one's own may not.
//
// With maxOpen > 0 it refuses, with store.OpenUploadsLimit, an account
// that already has maxOpen open uploads.
func (s *Store) CreateUpload(ctx context.Context, u evs.Upload, _ string, maxOpen int) (string, error) {
	if err := s.in.ready(); err != nil {
		return "", err
	}
	if s.presign == nil {
		return "", errNoPresigner
	}
	if err := s.putUpload(ctx, u, maxOpen); err != nil {
		return "", err
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

// putUpload writes u's record, within maxOpen open uploads when maxOpen >
// 0, holding the partition's create lock only while it counts and puts.
func (s *Store) putUpload(ctx context.Context, u evs.Upload, maxOpen int) error {
	if maxOpen > 0 {
		unlock, err := s.lockCreates(ctx, uploadPartition(u.AccountID))
		if err != nil {
			return err
		}
		defer unlock()
		now := s.now()
		n, oldest, err := s.openUploads(ctx, u.AccountID, now)
		if err != nil {
			return err
		}
		if n >= maxOpen {
			return store.OpenUploadsLimit(n, oldest, now)
		}
	}
	key := item{attrAccountID: avS(uploadPartition(u.AccountID)), attrID: avS(u.ID)}
	created, err := s.putOnce(ctx, &dynamodb.PutItemInput{
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
	}, key, "create upload")
	if err == nil && !created {
		return evs.Errorf(evs.CodeInvalidState, "The upload already exists.")
	}
	return err
}

// openUploads counts the account's open uploads at now and returns when the
// oldest expires.
func (s *Store) openUploads(ctx context.Context, accountID string, now time.Time) (int, time.Time, error) {
	var (
		n      int
		oldest time.Time
	)
	err := s.query(ctx, &dynamodb.QueryInput{
		TableName:              aws.String(s.t.Batches),
		KeyConditionExpression: aws.String("#a = :a"),
		FilterExpression:       aws.String("#exp > :now AND attribute_not_exists(#used)"),
		ProjectionExpression:   aws.String("#exp"),
		ExpressionAttributeNames: map[string]string{
			"#a": attrAccountID, "#exp": attrExpiresAtMs, "#used": attrUsedAt,
		},
		ExpressionAttributeValues: item{":a": avS(uploadPartition(accountID)), ":now": avTime(now)},
		ConsistentRead:            aws.Bool(true),
	}, "count open uploads", func(it item) bool {
		n++
		if exp := getTime(it, attrExpiresAtMs); oldest.IsZero() || exp.Before(oldest) {
			oldest = exp
		}
		return true
	})
	return n, oldest, err
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
	if _, ok := errors.AsType[*s3types.NoSuchKey](err); ok || apiCode(err) == "NoSuchKey" {
		return evs.Upload{}, nil, 0, store.NothingUploaded()
	}
	if err != nil {
		return evs.Upload{}, nil, 0, wrapErr("read upload", err)
	}
	return u, out.Body, aws.ToInt64(out.ContentLength), nil
}

// DropUpload marks the upload's record used, freeing its place among the
// open uploads, and deletes its object. The record stays until it expires,
// so a second batch from it finds the first; the mark is conditional on the
// record existing, so it writes no stray item.
func (s *Store) DropUpload(ctx context.Context, accountID, id string) error {
	_, err := s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.t.Batches),
		Key:                       item{attrAccountID: avS(uploadPartition(accountID)), attrID: avS(id)},
		UpdateExpression:          aws.String("SET #used = :now"),
		ConditionExpression:       aws.String("attribute_exists(#id)"),
		ExpressionAttributeNames:  map[string]string{"#used": attrUsedAt, "#id": attrID},
		ExpressionAttributeValues: item{":now": avTime(s.now())},
	})
	_, mark := applied(err, "mark upload used")
	_, err = s.in.o.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.in.bucket), Key: aws.String(uploadObject(accountID, id))})
	return errors.Join(mark, wrapErr("delete upload", err))
}
