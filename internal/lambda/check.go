package lambda

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Resource is a table or queue and where its name came from (a flag or a
// variable), which the message names so the reader knows what to change.
type Resource struct {
	Name   string // a table name, or a queue URL
	Source string // "--dynamodb-table", "EVS_KEYS_TABLE", ...
}

// Resources are what one command or function uses.
type Resources struct {
	Tables []Resource
	// Also are checks of other services' resources, run with the tables'
	// (app.CheckQueue): this package links DynamoDB alone, so the
	// authorizer function, which has no queue, links no SQS client.
	Also []func(ctx context.Context, region, fix string) error
	// Fix is what to do about a missing resource, for this reader.
	Fix string
	// Within bounds the check (0: Timeout). A command an operator runs
	// can wait longer than a cold start may.
	Within time.Duration
}

// FixDeploy is the usual fix: the resources come with the stack.
const FixDeploy = "deploy the stack (sam deploy), or fix the name"

// Timeout bounds the whole check: at a cold start it must not hold the
// function for long, and a check that cannot finish is left to the calls.
const Timeout = 3 * time.Second

// ErrMissing is what Check's errors match (errors.Is) when a resource
// does not exist or the region cannot be used.
var ErrMissing = errors.New("awscheck: missing")

type missing struct{ msg string }

func (e missing) Error() string { return e.msg }
func (e missing) Unwrap() error { return ErrMissing }

// NotFound is the error of a resource the service says does not exist:
// what ("DynamoDB table \"keys\""), where its name came from, the region
// and what to do.
func NotFound(what, source, region, fix string) error {
	fix = cmp.Or(fix, FixDeploy)
	return missing{fmt.Sprintf("%s (%s) does not exist in region %s: %s; or set AWS_REGION to the region the stack is in", what, source, region, fix)}
}

// regionName is the shape of every AWS region name: us-east-1,
// eu-central-2, us-gov-west-1, cn-north-1, ap-southeast-5.
var regionName = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]{1,2}$`)

// Region checks cfg's region: set, and shaped like a region name unless
// an endpoint of its own is set (a local AWS-API server takes any).
func Region(cfg aws.Config) error {
	switch {
	case cfg.Region == "":
		return missing{"no AWS region is set: set AWS_REGION to the stack's region (for example us-east-1), or use a profile (AWS_PROFILE) that has one"}
	case cfg.BaseEndpoint == nil && !regionName.MatchString(cfg.Region):
		return missing{fmt.Sprintf("AWS region %q is not a region name like us-east-1: fix AWS_REGION (or the profile's region)", cfg.Region)}
	}
	return nil
}

// Check checks cfg's region, then that every resource of r exists, all at
// once, and returns the first definite problem in the order of r.
func Check(ctx context.Context, cfg aws.Config, r Resources) error {
	if err := Region(cfg); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(r.Within, Timeout))
	defer cancel()
	ddb := dynamodb.NewFromConfig(cfg)
	errs := make([]error, len(r.Tables)+len(r.Also))
	var wg sync.WaitGroup
	for i, t := range r.Tables {
		if t.Name == "" {
			continue
		}
		wg.Go(func() {
			_, err := ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(t.Name)})
			if _, nf := errors.AsType[*ddbtypes.ResourceNotFoundException](err); nf {
				errs[i] = NotFound(fmt.Sprintf("DynamoDB table %q", t.Name), t.Source, cfg.Region, r.Fix)
				return
			}
			errs[i] = Unreachable(err, cfg.Region)
		})
	}
	for i, check := range r.Also {
		wg.Go(func() { errs[len(r.Tables)+i] = check(ctx, cfg.Region, r.Fix) })
	}
	wg.Wait()
	return cmp.Or(errs...)
}

// Unreachable is a definite problem when err says the service's host name
// does not resolve (no such region), else nil.
func Unreachable(err error, region string) error {
	if dns, ok := errors.AsType[*net.DNSError](err); ok && dns.IsNotFound && strings.HasSuffix(strings.TrimSuffix(dns.Name, "."), ".amazonaws.com") {
		return missing{fmt.Sprintf("cannot reach AWS in region %q (%s does not resolve): fix AWS_REGION", region, dns.Name)}
	}
	return nil
}
