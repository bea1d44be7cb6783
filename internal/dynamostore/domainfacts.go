package dynamostore

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/evs-dev/evs/internal/domainfacts"
)

// Domain facts (contract, section 12; docs/cache.md) on AWS: what a
// domain's accept-all probe said, shared by every instance of the worker
// and verify functions. One item per domain in the Results table, batchId
// "~domain#<domain>", seq 0, with catchAll ("accepted" or "rejected"),
// expiresAtMs and the TTL attribute. No batch ID starts with "~" and
// domains hold no "#", so no result row or cache entry shares a key; the
// verify function's IAM policy allows it these partitions and the result
// cache's, no others. Nothing in it is about an address or an account.

const (
	domainPartitionPrefix = "~domain#"
	attrCatchAll          = "catchAll"
)

func domainKey(domain string) item {
	return item{attrBatchID: avS(domainPartitionPrefix + domain), attrSeq: avN(0)}
}

// DomainFacts is the engine's verify.DomainFacts on AWS: the instance's
// memory first, then the domain's item, read once per domain and instance
// and kept in memory until the item's own expiry. A conclusive answer is
// written to both. A fault of DynamoDB reads as "not known" (the engine
// probes, as it would have) and is handed to Fault: the facts save probes,
// they never fail a verification.
type DomainFacts struct {
	s     *Store
	mem   *domainfacts.Memory
	count func(string)
	fault func(error)
}

// DomainFactsConfig configures DomainFacts.
type DomainFactsConfig struct {
	// Memory is the instance's tier (default: domainfacts.NewMemory with
	// its defaults and the store's clock). Its TTL is the items' too.
	Memory *domainfacts.Memory
	// Count, when set, is told of each lookup: "hit" (memory or item) or
	// "miss" (evs_domain_facts_total).
	Count func(result string)
	// Fault, when set, is told of each failed read or write.
	Fault func(err error)
}

// DomainFacts returns the domain facts of this store's Results table.
func (s *Store) DomainFacts(cfg DomainFactsConfig) *DomainFacts {
	if cfg.Memory == nil {
		cfg.Memory = domainfacts.NewMemory(domainfacts.Config{Now: s.now})
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
	out, err := f.s.c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(f.s.t.Results), Key: domainKey(domain)})
	if err != nil {
		f.fault(wrapErr("read the domain facts", err))
		f.count("miss")
		return "", false
	}
	r, expires := getS(out.Item, attrCatchAll), time.UnixMilli(getN(out.Item, attrExpiresAtMs))
	if out.Item == nil || !domainfacts.Conclusive(r) || !f.mem.Now().Before(expires) {
		// Absent, or expired and not yet deleted by TTL.
		f.count("miss")
		return "", false
	}
	f.mem.Remember(domain, r, expires)
	f.count("hit")
	return r, true
}

// KeepAcceptAll remembers a conclusive answer in memory and in the
// domain's item, for the memory's TTL.
func (f *DomainFacts) KeepAcceptAll(ctx context.Context, domain, result string) {
	if !domainfacts.Conclusive(result) {
		return
	}
	expires := f.mem.Now().Add(f.mem.TTL())
	f.mem.Remember(domain, result, expires)
	it := domainKey(domain)
	it[attrCatchAll] = avS(result)
	it[attrExpiresAtMs], it[attrExpiresAt] = avTime(expires), ttlSeconds(expires)
	if _, err := f.s.c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(f.s.t.Results), Item: it}); err != nil {
		f.fault(wrapErr("write the domain facts", err))
	}
}
