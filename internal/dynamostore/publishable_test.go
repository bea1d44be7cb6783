package dynamostore_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

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

// TestPublishableCallWRU measures, against moto, the writes a publishable
// key's call costs on AWS (the verify function's handler over DynamoDB,
// with the stack's default address quota): a widget at 50 calls a second
// for 6 s from 100 client addresses costs at most 2 WRU a call (and one
// more for the key's first call of a minute), where a marked charge per
// counter cost 16; the client addresses' counters are items of partitions
// of their own, not all the account's.
func TestPublishableCallWRU(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const clients, calls = 100, 300
	m := &writeMeter{partitions: map[string]int{}}
	clock := testkit.NewClock(t0)
	st := newStore(t, clock.Now, m.hook())
	sandbox := verify.NewSandbox(clock.Now)
	h := api.New(api.Deps{Engine: sandbox, Sandbox: sandbox, Now: clock.Now,
		Quota:             api.Quota{Store: st, Limit: 1_000_000, Period: api.QuotaMonth},
		PublishableLimits: api.PublishableLimits{PerAddress: 10, PerKey: 3000}})
	fn := lambda.Proxy(api.Mux(api.ObserveOptions{}, h.MountVerify(nil)))
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
	if maxWRU := 2*calls + 1; m.wru > maxWRU {
		t.Errorf("%d WRU for %d calls, want at most %d", m.wru, calls, maxWRU)
	}
	if len(m.partitions) != clients+1 || m.partitions["~quota#acct-1"] > calls+1 {
		t.Errorf("writes by partition: %v, want each client's apart and one a call on the account's", m.partitions)
	}
}

// TestPublishableLimitsOnLambda: on AWS the verify function counts a
// publishable key's calls a minute in DynamoDB, per client address (API
// Gateway's sourceIp) and per key: an address over its limit gets 429
// while another gets through; the key's own limit bounds all addresses;
// a new minute starts afresh; a secret key is not counted.
func TestPublishableLimitsOnLambda(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := testkit.NewClock(t0)
	st := newStore(t, clock.Now)
	sandbox := verify.NewSandbox(clock.Now)
	h := api.New(api.Deps{Engine: sandbox, Sandbox: sandbox, Now: clock.Now, Quota: api.Quota{Store: st},
		PublishableLimits: api.PublishableLimits{PerAddress: 3, PerKey: 5}})
	fn := lambda.Proxy(api.Mux(api.ObserveOptions{}, h.MountVerify(nil)))
	const origin = "https://shop.example"
	call := func(kind, keyID, ip string) events.APIGatewayProxyResponse {
		t.Helper()
		authz := map[string]any{"principalId": keyID, "accountId": "acct-1", "keyId": keyID, "testMode": "true"}
		if kind != "" {
			authz["keyKind"], authz["origins"] = kind, origin
		}
		ev := events.APIGatewayProxyRequest{Resource: "/v1/verify", Path: "/v1/verify", HTTPMethod: http.MethodPost,
			Headers: map[string]string{"Content-Type": "application/json", "Origin": origin},
			Body:    `{"email":"someone@example.com"}`,
			RequestContext: events.APIGatewayProxyRequestContext{RequestID: "rid", ResourcePath: "/v1/verify", HTTPMethod: http.MethodPost,
				Authorizer: authz, Identity: events.APIGatewayRequestIdentity{SourceIP: ip}}}
		r, err := fn(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for i := range 3 {
		if r := call("publishable", "pk1", "198.51.100.1"); r.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %d %s", i+1, r.StatusCode, r.Body)
		}
	}
	r := call("publishable", "pk1", "198.51.100.1")
	if r.StatusCode != http.StatusTooManyRequests || r.Headers["Retry-After"] == "" {
		t.Fatalf("4th call from one address: %d %v %s, want 429 with Retry-After", r.StatusCode, r.Headers, r.Body)
	}
	for i, ip := range []string{"198.51.100.2", "2001:db8::1"} {
		if r := call("publishable", "pk1", ip); r.StatusCode != http.StatusOK {
			t.Fatalf("another address %d: %d %s", i, r.StatusCode, r.Body)
		}
	}
	// The key has had 5 calls this minute: a fresh address is refused too.
	if r := call("publishable", "pk1", "198.51.100.3"); r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("the key over its limit: %d %s, want 429", r.StatusCode, r.Body)
	}
	// Another publishable key, and a secret key, are not counted with it.
	if r := call("publishable", "pk2", "198.51.100.4"); r.StatusCode != http.StatusOK {
		t.Fatalf("another key: %d %s", r.StatusCode, r.Body)
	}
	for range 5 {
		if r := call("", "sk1", "198.51.100.1"); r.StatusCode != http.StatusOK {
			t.Fatalf("secret key: %d %s", r.StatusCode, r.Body)
		}
	}
	clock.Advance(time.Minute)
	if r := call("publishable", "pk1", "198.51.100.1"); r.StatusCode != http.StatusOK {
		t.Fatalf("a minute later: %d %s", r.StatusCode, r.Body)
	}
}
