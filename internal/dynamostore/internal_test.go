package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/evs-dev/evs/internal/evs"
)

// The TTL attribute rounds up: DynamoDB may delete an item once its TTL
// second has passed, which must never be before its last readable
// millisecond.
func TestTTLSecondsRoundsUp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{time.Unix(100, 0), "100"},
		{time.Unix(100, int64(time.Millisecond)), "101"},
		{time.Unix(100, 999*int64(time.Millisecond)), "101"},
		{time.UnixMilli(1_795_000_000_123), "1795000001"},
	} {
		got := ttlSeconds(c.at).(*types.AttributeValueMemberN).Value
		if got != c.want {
			t.Errorf("ttlSeconds(%v) = %s, want %s", c.at, got, c.want)
		}
	}
}

func TestWrapErr(t *testing.T) {
	t.Parallel()
	coded := evs.Errorf(evs.CodeNotFound, "No such request.")
	for _, c := range []struct {
		name string
		err  error
		code string
	}{
		{"nil", nil, ""},
		{"coded passes through", coded, evs.CodeNotFound},
		{"throttled", &types.ProvisionedThroughputExceededException{Message: aws.String("x")}, evs.CodeUnavailable},
		{"missing table", &types.ResourceNotFoundException{Message: aws.String("x")}, evs.CodeUnavailable},
		{"service fault", &types.InternalServerError{Message: aws.String("x")}, evs.CodeUnavailable},
		{"deadline", context.DeadlineExceeded, evs.CodeUnavailable},
		{"network", errors.New("dial tcp: connection refused"), evs.CodeUnavailable},
		// A malformed request is this package's bug, not a fault to retry.
		{"validation", &smithy.GenericAPIError{Code: "ValidationException", Message: "x"}, evs.CodeInternal},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := wrapErr("op", fmt.Errorf("call: %w", c.err))
			if c.err == nil {
				err = wrapErr("op", nil)
			}
			if got := evs.ErrorCode(err); got != c.code {
				t.Errorf("code %q, want %q (%v)", got, c.code, err)
			}
			if c.err != nil && !errors.Is(err, c.err) {
				t.Errorf("%v does not wrap its cause", err)
			}
		})
	}
}

// SetBackfillBudget makes each sweep spend d on the index backfill (after
// its first page), for a test; it returns the restore.
func SetBackfillBudget(d time.Duration) (restore func()) {
	old := backfillBudget
	backfillBudget = d
	return func() { backfillBudget = old }
}
