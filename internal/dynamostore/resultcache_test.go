package dynamostore_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/evs-dev/evs/internal/dynamostore"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/testkit"
)

// itemSize is an item's size as DynamoDB bills it: the UTF-8 lengths of
// attribute names and string values, the bytes of binary values, and for
// a number one byte per two significant digits plus one.
func itemSize(it map[string]types.AttributeValue) int {
	n := 0
	for name, v := range it {
		n += len(name)
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			n += len(v.Value)
		case *types.AttributeValueMemberB:
			n += len(v.Value)
		case *types.AttributeValueMemberN:
			digits := strings.Trim(strings.NewReplacer("-", "", ".", "").Replace(v.Value), "0")
			n += (len(digits)+1)/2 + 1
		case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
			n++
		default:
			panic("itemSize: an attribute type the cache does not write")
		}
	}
	return n
}

// The cost figures of docs/cache.md, measured: a cache entry as the store
// writes it, for a typical verdict and for one at the limits (a 64-octet
// local part, five MX hosts and a 200-character reply), stays under 1 KB,
// so a write costs one write unit; and lookups are eventually consistent
// reads (half a read unit up to 4 KB).
func TestResultCacheItemCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var consistent []bool
	c := testkit.DynamoDB(t, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("evs-consistency",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if g, ok := in.Parameters.(*dynamodb.GetItemInput); ok {
						consistent = append(consistent, aws.ToBool(g.ConsistentRead))
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	})
	tables := newTables(t, c)
	s := dynamostore.New(dynamostore.Config{Client: c, Objects: testkit.S3(t), Tables: tables})
	const account = "9f0c2b7e-4a1d-4c3e-8b5f-2d6e7a8c9b01" // account IDs are UUIDs
	at := time.Date(2026, 11, 25, 16, 4, 5, 123_000_000, time.UTC)
	google := []string{"gmail-smtp-in.l.google.com", "alt1.gmail-smtp-in.l.google.com", "alt2.gmail-smtp-in.l.google.com",
		"alt3.gmail-smtp-in.l.google.com", "alt4.gmail-smtp-in.l.google.com"}
	typical := evs.Decision{
		Normalized: "jane.doe@gmail.com", Reason: evs.ReasonAcceptedEmail, Mode: evs.ModeFull,
		Flags: evs.Flags{Free: true},
		Checks: evs.Checks{
			Syntax: evs.SyntaxCheck{Valid: true},
			DNS:    evs.DNSCheck{Result: evs.DNSOK, MX: google, Rcode: "NOERROR"},
			SMTP: evs.SMTPCheck{Result: evs.SMTPAccepted, Host: google[0], Provider: "google", Code: 250, EnhancedCode: "2.1.5",
				Message: "OK 5b1f17b1804b1-4349f2a3c1bsi1234567f8f.123 - gsmtp", TLS: true, CatchAll: evs.SMTPRejected},
		},
		CheckedAt: evs.Time{Time: at}, DurationMs: 1834,
	}
	large := typical
	large.Normalized = strings.Repeat("x", 64) + "@" + strings.Repeat("d", 60) + ".example.com"
	large.Flags.Role = true
	large.Checks.SMTP.Message = strings.Repeat("m", 200)
	large.Checks.SMTP.Detail = "the server limited our rate: not evidence against the mailbox"
	if err := s.KeepDecisions(ctx, account, []store.CacheEntry{
		{Decision: typical, ExpiresAt: at.Add(24 * time.Hour)}, {Decision: large, ExpiresAt: at.Add(24 * time.Hour)},
	}); err != nil {
		t.Fatal(err)
	}
	for _, d := range []evs.Decision{typical, large} {
		out, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(tables.Results), Key: map[string]types.AttributeValue{
			"batchId": &types.AttributeValueMemberS{Value: "~cache#" + account + "#full#" + d.Normalized},
			"seq":     &types.AttributeValueMemberN{Value: "0"},
		}})
		if err != nil || out.Item == nil {
			t.Fatalf("%s: the entry is not there: %v", d.Normalized, err)
		}
		size := itemSize(out.Item)
		wru := math.Ceil(float64(size) / 1024)
		t.Logf("%d-octet address: cache item %d bytes: %.0f WRU a write, ½ RRU an eventually consistent read", len(d.Normalized), size, wru)
		if wru != 1 {
			t.Errorf("%s: cache item of %d bytes costs %.0f write units, docs/cache.md says 1", d.Normalized, size, wru)
		}
	}
	consistent = nil
	if _, _, found, err := s.CachedDecision(ctx, account, evs.ModeFull, typical.Normalized); !found || err != nil {
		t.Fatalf("lookup: found %v, %v", found, err)
	}
	if len(consistent) != 1 || consistent[0] {
		t.Errorf("a lookup made GetItem calls with ConsistentRead %v, want one eventually consistent read (½ RRU)", consistent)
	}
}
