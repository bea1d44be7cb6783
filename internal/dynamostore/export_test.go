package dynamostore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestExportWrittenInParts: an export job's object is written to S3 as its
// writer writes it — one object when it fits in one part, a multipart
// upload a part at a time when it does not — and, once the job is done,
// read back whole through its pre-signed URL; a writer that fails
// part-way leaves no object and no upload behind, and its own error to
// the caller.
func TestExportWrittenInParts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testkit.DynamoDB(t)
	objects := testkit.S3(t)
	tables := newTables(t, c)
	st := dynamostore.New(dynamostore.Config{Client: c, Objects: objects, Presign: s3.NewPresignClient(objects), Tables: tables, Now: time.Now})
	start := func(account, batch string) store.ExportJob {
		t.Helper()
		j, started, err := st.StartExport(ctx, store.ExportJob{AccountID: account, BatchID: batch}, "", time.Now().Add(time.Minute), 4)
		if err != nil || !started {
			t.Fatalf("start export: %v %v", started, err)
		}
		return j
	}

	row := []byte("someone@example.com,deliverable,accepted_email,,false,false,false,false,other,97\r\n")
	for i, rows := range []int{10, 250_000} { // about 1 KB; 21 MB, three parts
		j := start("acct-a", []string{"batch-1", "batch-2"}[i])
		var want bytes.Buffer
		err := st.WriteExport(ctx, j, func(w io.Writer) error {
			for range rows {
				want.Write(row)
				if _, err := w.Write(row); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%d rows: %v", rows, err)
		}
		if err := st.FinishExport(ctx, j, false); err != nil {
			t.Fatal(err)
		}
		done, found, err := st.ExportJob(ctx, j.AccountID, j.BatchID, "")
		if err != nil || !found || done.State != store.ExportDone || done.URL == "" {
			t.Fatalf("%d rows: job %+v %v %v", rows, done, found, err)
		}
		resp, err := http.Get(done.URL)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("%d rows: GET %d, %d bytes (%v), want %d bytes", rows, resp.StatusCode, len(got), err, want.Len())
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") {
			t.Errorf("%d rows: Content-Type %q", rows, ct)
		}
	}

	broken := errors.New("the results could not be read")
	err := st.WriteExport(ctx, start("acct-b", "batch-3"), func(w io.Writer) error {
		for range 200_000 { // past the first part: an upload was started
			if _, err := w.Write(row); err != nil {
				return err
			}
		}
		return broken
	})
	if !errors.Is(err, broken) {
		t.Fatalf("a failing writer: %v, want its own error", err)
	}
	list, err := objects.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(tables.Inputs), Prefix: aws.String("exports/acct-b/")})
	if err != nil || len(list.Contents) != 0 {
		t.Fatalf("objects after a failed export: %v (%v)", list.Contents, err)
	}
	ups, err := objects.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(tables.Inputs)})
	if err != nil || len(ups.Uploads) != 0 {
		t.Fatalf("uploads left after a failed export: %d (%v)", len(ups.Uploads), err)
	}
}
