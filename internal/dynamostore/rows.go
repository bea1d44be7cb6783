package dynamostore

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// The rows of a batch made from a CSV list (api.RowStore) are one S3 object
// beside the batch's input, under inputs/, so they expire with it: one
// PutObject at creation, one GetObject per export, not a write per row.

// rowsObject is the S3 key of a batch's rows.
func rowsObject(accountID, batchID string) string {
	return "inputs/" + accountID + "/" + batchID + "/rows"
}

// PutRows stores rows, size bytes, as the account's batch batchID's; the
// bucket's rule for inputs/ removes them. A second put replaces the first.
func (s *Store) PutRows(ctx context.Context, accountID, batchID string, _ time.Time, rows io.Reader, size int64) error {
	if err := s.in.ready(); err != nil {
		return err
	}
	_, err := s.in.o.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.in.bucket), Key: aws.String(rowsObject(accountID, batchID)),
		Body: rows, ContentLength: aws.Int64(size), ContentType: aws.String("text/csv"),
	})
	return wrapErr("store batch rows", err)
}

// OpenRows streams the rows of the account's batch; found is false when it
// has none (a batch made from JSON, or before rows were kept).
func (s *Store) OpenRows(ctx context.Context, accountID, batchID string) (io.ReadCloser, bool, error) {
	if err := s.in.ready(); err != nil {
		return nil, false, err
	}
	out, err := s.in.o.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.in.bucket), Key: aws.String(rowsObject(accountID, batchID))})
	if _, ok := errors.AsType[*s3types.NoSuchKey](err); ok || apiCode(err) == "NoSuchKey" {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, wrapErr("read batch rows", err)
	}
	return out.Body, true, nil
}
