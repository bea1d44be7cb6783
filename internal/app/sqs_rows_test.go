package app_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestCSVRowsOnAWS: on the AWS deployment (DynamoDB, S3, SQS in moto) a
// batch made from a CSV list keeps the user's rows as an S3 object beside
// its input, and both ways of reading its CSV — the reply, and the export
// job the worker writes to S3 — give the user's rows in order, repeats
// marked, with the verdicts appended.
func TestCSVRowsOnAWS(t *testing.T) {
	t.Parallel()
	w := newScaleWorld(t)
	var list strings.Builder
	list.WriteString("n;Email;city\n")
	const n = 300
	for i := range n {
		switch {
		case i == 5:
			list.WriteString("5;;nowhere\n") // no address
		case i == 6:
			list.WriteString("6;bad\"row@x.example;Lyon\n") // a stray quote
		case i == 250:
			list.WriteString("250;u10+accepted_email@D10.EXAMPLE;Lyon\n") // row 10's address
		default:
			fmt.Fprintf(&list, "%d;u%d+accepted_email@d%d.example;\"Lyon; FR\"\n", i, i, i%50)
		}
	}
	req := events.APIGatewayProxyRequest{
		Resource: "/v1/requests", Path: "/v1/requests", HTTPMethod: http.MethodPost, Body: list.String(),
		QueryStringParameters: map[string]string{"mode": "quick"},
		Headers:               map[string]string{"Content-Type": "text/csv"},
		RequestContext: events.APIGatewayProxyRequestContext{
			RequestID: uuid.NewString(), ResourcePath: "/v1/requests", HTTPMethod: http.MethodPost,
			Authorizer: map[string]any{"principalId": w.acct, "accountId": w.acct, "keyId": "k1", "testMode": "true"},
		},
	}
	resp, err := lambda.Proxy(api.Mux(api.ObserveOptions{}, w.h.MountAll(nil)))(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	id := w.created(resp, n-1) // the row without an address is a row, not an address
	w.drain(id)

	keys, err := testkit.S3(t).ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{
		Bucket: aws.String(w.tables.Inputs), Prefix: aws.String("inputs/" + w.acct + "/" + id + "/rows")})
	if err != nil || len(keys.Contents) != 1 {
		t.Fatalf("the rows object: %v %v", keys, err)
	}

	// In the reply, as a handler without export jobs answers it.
	saved := w.h
	w.h = api.New(api.Deps{Idempotency: idempotency.New(w.st, time.Now), Batches: w.st})
	inline := w.get(w.acct, "/v1/requests/{id}/results", id, nil, map[string]string{"Accept": "text/csv"})
	w.h = saved
	if inline.StatusCode != http.StatusOK {
		t.Fatalf("results: %d %s", inline.StatusCode, inline.Body)
	}
	recs, err := csv.NewReader(strings.NewReader(inline.Body)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"n", "Email", "city", "evs_status", "evs_reason"}; !slices.Equal(recs[0][:5], want) || len(recs) != n+1 {
		t.Fatalf("header %q, %d rows; want %q..., %d rows", recs[0], len(recs)-1, want, n)
	}
	for i, rec := range recs[1:] {
		line := fmt.Sprint(i + 2)
		switch {
		case rec[0] != fmt.Sprint(i) || rec[12] != line:
			t.Fatalf("row %d: %q", i, rec)
		case i == 5 && (rec[1] != "" || rec[3] != ""):
			t.Fatalf("the row without an address: %q", rec)
		case i == 6 && (rec[1] != "bad\"row@x.example" || rec[4] != "invalid_syntax"):
			t.Fatalf("the unreadable row: %q", rec)
		case i == 250 && (rec[13] != "12" || rec[4] != "accepted_email" || !slices.Equal(rec[3:12], recs[11][3:12])):
			t.Fatalf("the repeat: %q, first %q", rec, recs[11])
		case i != 5 && i != 6 && i != 250 && (rec[2] != "Lyon; FR" || rec[4] != "accepted_email" || rec[13] != ""):
			t.Fatalf("row %d: %q", i, rec)
		}
	}

	// As the export job the worker writes to S3.
	link := w.ready(w.acct, "/v1/requests/{id}/export", id, nil, nil)
	var body struct{ URL string }
	if link.StatusCode != http.StatusOK || json.Unmarshal([]byte(link.Body), &body) != nil {
		t.Fatalf("export: %d %s", link.StatusCode, link.Body)
	}
	if got := download(t, body.URL); got != inline.Body {
		t.Fatalf("the export holds\n%.500s\nwant\n%.500s", got, inline.Body)
	}
	// layout=results is one row per address, as for a JSON list.
	per := w.ready(w.acct, "/v1/requests/{id}/export", id, map[string]string{"layout": "results"}, nil)
	if json.Unmarshal([]byte(per.Body), &body) != nil {
		t.Fatalf("export: %d %s", per.StatusCode, per.Body)
	}
	if got := download(t, body.URL); !strings.HasPrefix(got, "email,status,") || strings.Count(got, "\n") != n-1 {
		t.Fatalf("layout=results: %d lines: %.300s", strings.Count(got, "\n"), got)
	}
}
