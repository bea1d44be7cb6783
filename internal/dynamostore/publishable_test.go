package dynamostore_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/lambda"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// writeMeter counts the write capacity units a client's calls cost, as
// DynamoDB bills them for items under 1 KB: one per item written, a
// conditional write that fails included; two per item of a transaction.
// It also notes the partitions written.
type writeMeter struct {
	mu         sync.Mutex
	wru        int
	partitions map[string]int
}

func (m *writeMeter) hook() func(*dynamodb.Options) {
	return inject(hook{before: func(in any) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		switch in := in.(type) {
		case *dynamodb.UpdateItemInput:
			m.wru++
			m.partitions[in.Key["accountId"].(*types.AttributeValueMemberS).Value]++
		case *dynamodb.PutItemInput, *dynamodb.DeleteItemInput:
			m.wru++
		case *dynamodb.TransactWriteItemsInput:
			m.wru += 2 * len(in.TransactItems)
		case *dynamodb.BatchWriteItemInput:
			for _, rs := range in.RequestItems {
				m.wru += len(rs)
			}
		}
		return nil
	}})
}

// plainQuota hides the store's PublishableQuota: the api then charges a
// publishable call as it did before, one marked charge per counter.
type plainQuota struct{ api.AddressQuota }

// TestPublishableCallWRU measures, against moto, the writes a publishable
// key's call costs on AWS (the verify function's handler over DynamoDB,
// with the stack's default address quota): a widget at 50 calls a second
// for 6 s from 100 client addresses costs at most 2 WRU a call (and one
// more for the key's first call of a minute), against 16 (on 20 calls: moto's
// transactions are slow) when each of its four counters was a marked
// charge; the client addresses' counters are
// items of partitions of their own, not all the account's.
func TestPublishableCallWRU(t *testing.T) {
	ctx := context.Background()
	const clients = 100
	for _, tt := range []struct {
		name          string
		plain         bool
		calls, maxWRU int
	}{{"one write each", false, 300, 2*300 + 1}, {"marked charges (before)", true, 20, 16 * 20}} {
		t.Run(tt.name, func(t *testing.T) {
			m := &writeMeter{partitions: map[string]int{}}
			clock := testkit.NewClock(t0)
			st := newStore(t, clock.Now, m.hook())
			var q api.AddressQuota = st
			if tt.plain {
				q = plainQuota{st}
			}
			sandbox := verify.NewSandbox(clock.Now)
			h := api.New(api.Deps{Engine: sandbox, Sandbox: sandbox, Now: clock.Now,
				Quota:             api.Quota{Store: q, Limit: 1_000_000, Period: api.QuotaMonth},
				PublishableLimits: api.PublishableLimits{PerAddress: 10, PerKey: 3000}})
			fn := lambda.Proxy(api.Mux(api.ObserveOptions{}, h.MountVerify(nil)))
			calls := tt.calls
			for i := range calls {
				ev := events.APIGatewayProxyRequest{Resource: "/v1/verify", Path: "/v1/verify", HTTPMethod: http.MethodPost,
					Headers: map[string]string{"Content-Type": "application/json", "Origin": "https://shop.example"},
					Body:    fmt.Sprintf(`{"email":"ok-%d@example.com"}`, i),
					RequestContext: events.APIGatewayProxyRequestContext{RequestID: "rid", ResourcePath: "/v1/verify", HTTPMethod: http.MethodPost,
						Authorizer: map[string]any{"principalId": "pk1", "accountId": "acct-1", "keyId": "pk1", "testMode": "true",
							"keyKind": "publishable", "origins": "https://shop.example"},
						Identity: events.APIGatewayRequestIdentity{SourceIP: fmt.Sprintf("198.51.100.%d", i%clients)}}}
				r, err := fn(ctx, ev)
				if err != nil || r.StatusCode != http.StatusOK {
					t.Fatalf("call %d: %d %s %v", i+1, r.StatusCode, r.Body, err)
				}
			}
			t.Logf("%d WRU for %d calls (%.2f a call), %d partitions written", m.wru, calls, float64(m.wru)/float64(calls), len(m.partitions))
			if m.wru > tt.maxWRU {
				t.Errorf("%d WRU for %d calls, want at most %d", m.wru, calls, tt.maxWRU)
			}
			if !tt.plain && (len(m.partitions) != clients+1 || m.partitions["~quota#acct-1"] > calls+1) {
				t.Errorf("writes by partition: %v, want each client's apart and one a call on the account's", m.partitions)
			}
		})
	}
}
