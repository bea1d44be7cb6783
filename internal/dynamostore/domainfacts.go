package dynamostore

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/evs-dev/evs/internal/cache"
)

// Domain facts (docs/cache.md) on AWS: what a domain's accept-all probe
// said, and how long after greylisting us its server let a retry through,
// shared by every worker and verify instance. One item per domain in the
// Results table, batchId "~domain#<domain>", seq 0, with catchAll and
// expiresAtMs, greyDelayMs and greyExpiresAtMs, and the TTL attribute. Each
// fact's UpdateItem sets its own attributes only, so learning one never
// erases the other; the TTL takes the latest (so later) expiry, as every
// fact has the same TTL. The verify function's IAM policy allows it these
// partitions and the result cache's, no others. Nothing in it is about an
// address or an account.

const (
	domainPartitionPrefix = "~domain#"
	attrCatchAll          = "catchAll"
	attrGreyDelayMs       = "greyDelayMs"
	attrGreyExpiresAtMs   = "greyExpiresAtMs"
)

func domainKey(domain string) item {
	return item{attrBatchID: avS(domainPartitionPrefix + domain), attrSeq: avN(0)}
}

// DomainFacts is verify.DomainFacts on AWS: the instance's memory first,
// then the domain's item, read once per domain and instance and kept until
// its expiry. A conclusive answer is written to both. A DynamoDB fault reads
// as "not known" and goes to Fault: the facts save probes, they never fail
// a verification.
type DomainFacts struct {
	s     *Store
	mem   *cache.Facts
	count func(string)
	fault func(error)
}

// DomainFactsConfig configures DomainFacts.
type DomainFactsConfig struct {
	// Memory is the instance's tier (default: cache.NewFacts with
	// its defaults and the store's clock). Its TTL is the items' too.
	Memory *cache.Facts
	Count  func(result string) // when set, told "hit" or "miss" of each lookup
	Fault  func(err error)     // when set, told of each failed read or write
}

// DomainFacts returns the domain facts of this store's Results table.
func (s *Store) DomainFacts(cfg DomainFactsConfig) *DomainFacts {
	if cfg.Memory == nil {
		cfg.Memory = cache.NewFacts(cache.FactsConfig{Now: s.now})
	}
	if cfg.Count == nil {
		cfg.Count = func(string) {}
	}
	if cfg.Fault == nil {
		cfg.Fault = func(error) {}
	}
	return &DomainFacts{s: s, mem: cfg.Memory, count: cfg.Count, fault: cfg.Fault}
}

// AcceptAll returns the remembered accept-all answer of domain.
func (f *DomainFacts) AcceptAll(ctx context.Context, domain string) (string, bool) {
	if r, ok := f.mem.AcceptAll(ctx, domain); ok {
		f.count("hit")
		return r, true
	}
	it, ok := f.read(ctx, domain)
	r := getS(it, attrCatchAll)
	if !ok || !cache.Conclusive(r) || !f.mem.Now().Before(time.UnixMilli(getN(it, attrExpiresAtMs))) {
		// Absent, or expired and not yet deleted by TTL.
		f.count("miss")
		return "", false
	}
	f.count("hit")
	return r, true
}

// GreyDelay returns how long after greylisting us the domain's server let
// a retry through, when some instance learned it (batch.GreyFacts).
func (f *DomainFacts) GreyDelay(ctx context.Context, domain string) (time.Duration, bool) {
	if d, ok := f.mem.GreyDelay(ctx, domain); ok {
		return d, true
	}
	if _, ok := f.read(ctx, domain); !ok {
		return 0, false
	}
	return f.mem.GreyDelay(ctx, domain) // what read found still fresh
}

// read reads the domain's item and remembers in memory, until their own
// expiries, the facts it holds still fresh: one read serves both.
func (f *DomainFacts) read(ctx context.Context, domain string) (item, bool) {
	out, err := f.s.c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(f.s.t.Results), Key: domainKey(domain)})
	if err != nil {
		f.fault(wrapErr("read the domain facts", err))
		return nil, false
	}
	if out.Item == nil {
		return nil, false
	}
	now := f.mem.Now()
	if exp := time.UnixMilli(getN(out.Item, attrExpiresAtMs)); now.Before(exp) {
		f.mem.Remember(domain, getS(out.Item, attrCatchAll), exp)
	}
	if exp := time.UnixMilli(getN(out.Item, attrGreyExpiresAtMs)); now.Before(exp) {
		f.mem.RememberGreyDelay(domain, time.Duration(getN(out.Item, attrGreyDelayMs))*time.Millisecond, exp)
	}
	return out.Item, true
}

// KeepAcceptAll remembers a conclusive answer in memory and in the item.
func (f *DomainFacts) KeepAcceptAll(ctx context.Context, domain, result string) {
	if !cache.Conclusive(result) {
		return
	}
	expires := f.mem.Now().Add(f.mem.TTL())
	f.mem.Remember(domain, result, expires)
	f.write(ctx, domain, expires, item{attrCatchAll: avS(result), attrExpiresAtMs: avTime(expires)})
}

// KeepGreyDelay remembers, in memory and in the domain's item, that a retry
// d after the domain's server greylisted us got through.
func (f *DomainFacts) KeepGreyDelay(ctx context.Context, domain string, d time.Duration) {
	if d <= 0 {
		return
	}
	expires := f.mem.Now().Add(f.mem.TTL())
	f.mem.RememberGreyDelay(domain, d, expires)
	f.write(ctx, domain, expires, item{attrGreyDelayMs: avN(d.Milliseconds()), attrGreyExpiresAtMs: avTime(expires)})
}

// write sets one fact's attributes, and the TTL attribute to expires, on
// the domain's item, leaving the other fact's as they are.
func (f *DomainFacts) write(ctx context.Context, domain string, expires time.Time, set item) {
	set[attrExpiresAt] = ttlSeconds(expires)
	names, values := map[string]string{}, item{}
	var exprs []string
	for _, name := range slices.Sorted(maps.Keys(set)) {
		k := strconv.Itoa(len(exprs))
		names["#a"+k], values[":v"+k] = name, set[name]
		exprs = append(exprs, "#a"+k+" = :v"+k)
	}
	if _, err := f.s.c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(f.s.t.Results), Key: domainKey(domain),
		UpdateExpression:         aws.String("SET " + strings.Join(exprs, ", ")),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values,
	}); err != nil {
		f.fault(wrapErr("write the domain facts", err))
	}
}
