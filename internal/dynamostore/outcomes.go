package dynamostore

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// Reported outcomes (store.Outcomes) live in the Batches table, in a
// partition per account, "~out#<accountId>" (no account ID starts with "~"),
// so batch queries never read them. The sort key is
// "<address>#<13-digit epoch ms>#<kind>": the natural key, so a conditional
// put stores an outcome reported twice once, and an address's outcomes are
// one Query on "<address>#" (a domain holds no "#"). Each item expires
// EVS_OUTCOME_TTL after it was received; the sweep's index never holds it.
//
// The item "~any" says the account has reported something, so an account
// that never did costs a batch one GetItem, not a Query per address. It
// expires with the latest outcome.
//
// Per-domain counts of deliveries and hard bounces (store.DomainCounts) are
// counter items of the same partition, "@dom#<domain>#<13-digit bucket end>"
// (store.DomainBucket; no address starts with "@"), and of "~out#~verified"
// for every account's together, which counts only the marks
// store.SharesOutcome shares (attrMarkShared). PutOutcomes and DeleteOutcomes
// ADD to them; each expires at its bucket's end, and reads ignore it after.
const (
	outcomePartitionPrefix = "~out#"
	outcomeMarkerID        = "~any"
	domainCountPrefix      = "@dom#"
	// sharedOutcomeAccount is the pseudo-account of the shared counters.
	// Those of "~shared", made before store.SharesOutcome, are never read.
	sharedOutcomeAccount = "~verified"

	attrDelivered   = "delivered"
	attrHardBounces = "hardBounces"
	// attrMarkClass is a mark's class (evs.DomainClass): an item
	// "<address>#~<class>" says the address is counted in its domain's
	// counts, until it expires with the outcome that made it.
	attrMarkClass  = "markClass"
	attrMarkShared = "markShared" // the mark counts in the shared counts too

	attrOutcome    = "outcome"
	attrOutAddress = "address"
	attrOutAtMs    = "atMs"
	attrBounceType = "bounceType"
	attrSMTPReply  = "smtpReply"
	attrVerdict    = "verdict"
	attrScore      = "score"

	outcomeQueryWorkers = 8  // one AddressOutcomes' Queries in flight
	outcomePutWorkers   = 16 // so a list of 50,000 fits in API Gateway's 29 s
)

func outcomePartition(accountID string) types.AttributeValue {
	return avS(outcomePartitionPrefix + accountID)
}

func markID(address, class string) string { return address + "#~" + class }

// markOutcome makes the mark that counts the address in class, unless a
// live one is there, and adds to deltas the address counted and an expired
// mark TTL has not deleted yet uncounted (its bucket may still be read). The
// mark shares the address's prefix, so deleting the address deletes it.
func (s *Store) markOutcome(ctx context.Context, accountID, address, class string, shared bool, expiresAt time.Time, deltas store.DomainDeltas) error {
	token := newToken()
	key := item{attrAccountID: outcomePartition(accountID), attrID: avS(markID(address, class))}
	it := item{attrMarkClass: avS(class), attrMarkShared: avBool(shared), attrExpiresAtMs: avTime(expiresAt), attrExpiresAt: ttlSeconds(expiresAt),
		attrCreateToken: avS(token)}
	maps.Copy(it, key)
	out, err := s.c.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.t.Batches), Item: it,
		ConditionExpression:       aws.String("attribute_not_exists(#id) OR #exp <= :now"),
		ExpressionAttributeNames:  map[string]string{"#id": attrID, "#exp": attrExpiresAtMs},
		ExpressionAttributeValues: item{":now": avTime(s.now())},
		ReturnValues:              types.ReturnValueAllOld,
	})
	if isConditionFailed(err) {
		// A live mark: counted, unless this call's own (an SDK retry).
		_, mine, err := s.mine(ctx, s.t.Batches, key, attrCreateToken, token, "count outcomes by domain")
		if mine {
			deltas.Add(address, class, expiresAt, 1, shared)
		}
		return err
	}
	if err != nil {
		return wrapErr("count outcomes by domain", err)
	}
	if old := out.Attributes; len(old) > 0 {
		deltas.Add(address, class, time.UnixMilli(getN(old, attrExpiresAtMs)), -1, getBool(old, attrMarkShared))
	}
	deltas.Add(address, class, expiresAt, 1, shared)
	return nil
}

// writeDomainCounts adds deltas to the account's counters, and their shared
// part to the shared ones, skipping ended buckets. It runs after the
// outcomes' writes, even failed ones, so the counts follow what was written.
func (s *Store) writeDomainCounts(ctx context.Context, accountID string, deltas store.DomainDeltas) error {
	now := s.now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(outcomePutWorkers)
	for k, c := range deltas {
		if !k.Bucket.After(now) || (c == evs.DomainCounts{}) {
			continue
		}
		acct := accountID
		if k.Shared {
			acct = sharedOutcomeAccount
		}
		g.Go(func() error {
			_, err := s.c.UpdateItem(gctx, &dynamodb.UpdateItemInput{
				TableName:        aws.String(s.t.Batches),
				Key:              item{attrAccountID: outcomePartition(acct), attrID: avS(fmt.Sprintf("%s%s#%013d", domainCountPrefix, k.Domain, k.Bucket.UnixMilli()))},
				UpdateExpression: aws.String("ADD #d :d, #b :b SET #exp = :exp, #ttl = :ttl"),
				ExpressionAttributeNames: map[string]string{"#d": attrDelivered, "#b": attrHardBounces,
					"#exp": attrExpiresAtMs, "#ttl": attrExpiresAt},
				ExpressionAttributeValues: item{":d": avN(int64(c.Delivered)), ":b": avN(int64(c.HardBounces)),
					":exp": avTime(k.Bucket), ":ttl": ttlSeconds(k.Bucket)},
			})
			return wrapErr("count outcomes by domain", err)
		})
	}
	return g.Wait()
}

// DomainCounts returns the deliveries and hard bounces of each domain that
// has any, from the account's (or the shared) unended buckets: one Query per
// domain, eight in flight.
func (s *Store) DomainCounts(ctx context.Context, accountID string, domains []string, shared bool) (map[string]evs.DomainCounts, error) {
	out := map[string]evs.DomainCounts{}
	if len(domains) == 0 {
		return out, nil
	}
	now := s.now()
	acct := sharedOutcomeAccount
	if !shared {
		acct = accountID
		if reported, err := s.hasOutcomes(ctx, accountID, now, "read domain counts"); err != nil {
			return nil, err
		} else if !reported {
			return out, nil
		}
	}
	return eachDistinct(ctx, domains, func(ctx context.Context, d string) (evs.DomainCounts, bool, error) {
		var c evs.DomainCounts
		err := s.query(ctx, &dynamodb.QueryInput{
			TableName:                 aws.String(s.t.Batches),
			KeyConditionExpression:    aws.String("#a = :a AND begins_with(#id, :p)"),
			ExpressionAttributeNames:  map[string]string{"#a": attrAccountID, "#id": attrID},
			ExpressionAttributeValues: item{":a": outcomePartition(acct), ":p": avS(domainCountPrefix + d + "#")},
		}, "read domain counts", func(it item) bool {
			if getN(it, attrExpiresAtMs) > now.UnixMilli() {
				c.Delivered += int(getN(it, attrDelivered))
				c.HardBounces += int(getN(it, attrHardBounces))
			}
			return true
		})
		return evs.DomainCounts{Delivered: max(c.Delivered, 0), HardBounces: max(c.HardBounces, 0)}, !c.Zero(), err
	})
}

// hasOutcomes tells whether the account has an unexpired outcome.
func (s *Store) hasOutcomes(ctx context.Context, accountID string, now time.Time, op string) (bool, error) {
	m, err := s.c.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(s.t.Batches),
		Key:       item{attrAccountID: outcomePartition(accountID), attrID: avS(outcomeMarkerID)},
	})
	if err != nil {
		return false, wrapErr(op, err)
	}
	return m.Item != nil && getN(m.Item, attrExpiresAtMs) > now.UnixMilli(), nil
}

// eachDistinct runs fn once per distinct key, outcomeQueryWorkers at once,
// and returns what each found (ok) by key, or the first error.
func eachDistinct[V any](ctx context.Context, keys []string, fn func(ctx context.Context, key string) (v V, ok bool, err error)) (map[string]V, error) {
	var mu sync.Mutex
	out := map[string]V{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(outcomeQueryWorkers)
	for _, k := range slices.Compact(slices.Sorted(slices.Values(keys))) {
		g.Go(func() error {
			v, ok, err := fn(gctx, k)
			if ok && err == nil {
				mu.Lock()
				out[k] = v
				mu.Unlock()
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// PutOutcomes makes a conditional put per outcome, a few in flight: not one
// transaction, so after a fault those written are duplicates to the retry.
func (s *Store) PutOutcomes(ctx context.Context, accountID string, os []evs.Outcome, expiresAt time.Time) (int, error) {
	if len(os) == 0 {
		return 0, nil
	}
	// The marker first, so AddressOutcomes never misses an outcome.
	if _, err := s.c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.t.Batches), Item: item{
		attrAccountID: outcomePartition(accountID), attrID: avS(outcomeMarkerID),
		attrExpiresAtMs: avTime(expiresAt), attrExpiresAt: ttlSeconds(expiresAt),
	}}); err != nil {
		return 0, wrapErr("store outcomes", err)
	}
	var (
		mu     sync.Mutex
		added  int
		deltas = store.DomainDeltas{}
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(outcomePutWorkers)
	for _, o := range os {
		if gctx.Err() != nil {
			break // a put failed: the rest wait for the client's retry
		}
		g.Go(func() error {
			ok, err := s.putOutcome(gctx, accountID, o, expiresAt)
			mine := store.DomainDeltas{}
			if class := o.DomainClass(); ok && class != "" && err == nil {
				// Counted even when the call fails: a retry finds it a
				// duplicate.
				err = s.markOutcome(context.WithoutCancel(gctx), accountID, o.Address, class, store.SharesOutcome(o), expiresAt, mine)
			}
			mu.Lock()
			defer mu.Unlock()
			if ok {
				added++
			}
			for k, c := range mine {
				deltas[k] = evs.DomainCounts{Delivered: deltas[k].Delivered + c.Delivered, HardBounces: deltas[k].HardBounces + c.HardBounces}
			}
			return err
		})
	}
	// What was written is counted even when the rest failed.
	if err := cmp.Or(g.Wait(), s.writeDomainCounts(context.WithoutCancel(ctx), accountID, deltas)); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, wrapErr("store outcomes", err)
	}
	return added, nil
}

// putOutcome writes o unless its key is stored.
func (s *Store) putOutcome(ctx context.Context, accountID string, o evs.Outcome, expiresAt time.Time) (added bool, err error) {
	it := item{
		attrAccountID: outcomePartition(accountID), attrID: avS(fmt.Sprintf("%s#%013d#%s", o.Address, o.At.UnixMilli(), o.Kind)),
		attrOutAddress: avS(o.Address), attrOutAtMs: avTime(o.At), attrOutcome: avS(o.Kind),
		attrExpiresAtMs: avTime(expiresAt), attrExpiresAt: ttlSeconds(expiresAt),
	}
	if o.BounceType != "" {
		it[attrBounceType] = avS(o.BounceType)
	}
	if o.SMTPReply != "" {
		it[attrSMTPReply] = avS(o.SMTPReply)
	}
	if o.Verdict != "" {
		it[attrVerdict], it[attrScore] = avS(o.Verdict), avN(int64(o.Score))
	}
	return s.putOnce(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(s.t.Batches), Item: it,
		// An expired item TTL has not deleted yet is replaced.
		ConditionExpression:       aws.String("attribute_not_exists(#id) OR #exp <= :now"),
		ExpressionAttributeNames:  map[string]string{"#id": attrID, "#exp": attrExpiresAtMs},
		ExpressionAttributeValues: item{":now": avTime(s.now())},
	}, item{attrAccountID: it[attrAccountID], attrID: it[attrID]}, "store outcomes")
}

// AddressOutcomes makes one Query per address, eight in flight.
func (s *Store) AddressOutcomes(ctx context.Context, accountID string, addresses []string) (map[string][]evs.Outcome, error) {
	out := map[string][]evs.Outcome{}
	if len(addresses) == 0 {
		return out, nil
	}
	now := s.now()
	if reported, err := s.hasOutcomes(ctx, accountID, now, "read outcomes"); err != nil {
		return nil, err
	} else if !reported {
		return out, nil
	}
	return eachDistinct(ctx, addresses, func(ctx context.Context, a string) ([]evs.Outcome, bool, error) {
		var os []evs.Outcome
		err := s.queryOutcomes(ctx, accountID, a+"#", false, func(it item) error {
			if o, ok := outcomeFrom(it, now); ok {
				os = append(os, o)
			}
			return nil
		})
		return os, len(os) > 0, err
	})
}

// DeleteOutcomes deletes the account's outcomes of address, expired or not.
func (s *Store) DeleteOutcomes(ctx context.Context, accountID, address string) (int, error) {
	var its []item // a mark has a class, to uncount; an outcome none
	err := s.queryOutcomes(ctx, accountID, address+"#", true, func(it item) error {
		its = append(its, it)
		return nil
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for chunk := range slices.Chunk(its, cacheWriteBatch) {
		keys := make([]types.WriteRequest, len(chunk))
		for i, it := range chunk {
			keys[i] = types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: item{attrAccountID: it[attrAccountID], attrID: it[attrID]}}}
		}
		if err := s.batchWrite(ctx, s.t.Batches, keys, "delete outcomes", "deletes"); err != nil {
			return n, err
		}
		// Each chunk deleted whole uncounts its marks.
		deltas := store.DomainDeltas{}
		for _, it := range chunk {
			if class := getS(it, attrMarkClass); class == "" {
				n++
			} else {
				deltas.Add(address, class, time.UnixMilli(getN(it, attrExpiresAtMs)), -1, getBool(it, attrMarkShared))
			}
		}
		if err := s.writeDomainCounts(ctx, accountID, deltas); err != nil {
			return n, err
		}
	}
	return n, nil
}

// EachOutcome calls fn with each of the account's unexpired outcomes.
func (s *Store) EachOutcome(ctx context.Context, accountID string, fn func(evs.Outcome) error) error {
	now := s.now()
	return s.queryOutcomes(ctx, accountID, "", false, func(it item) error {
		if o, ok := outcomeFrom(it, now); ok {
			return fn(o)
		}
		return nil
	})
}

// queryOutcomes passes to each the outcomes and marks of the account whose
// id starts with prefix ("" for all; never the marker or a counter);
// keysOnly reads the key and what a delete uncounts.
func (s *Store) queryOutcomes(ctx context.Context, accountID, prefix string, keysOnly bool, each func(item) error) error {
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.t.Batches),
		KeyConditionExpression:    aws.String("#a = :a"),
		ExpressionAttributeNames:  map[string]string{"#a": attrAccountID},
		ExpressionAttributeValues: item{":a": outcomePartition(accountID)},
	}
	if prefix != "" {
		in.KeyConditionExpression = aws.String("#a = :a AND begins_with(#id, :p)")
		in.ExpressionAttributeNames["#id"] = attrID
		in.ExpressionAttributeValues[":p"] = avS(prefix)
	}
	if keysOnly {
		// The key, and what a delete takes out of the domain's counts.
		in.ProjectionExpression = aws.String("#a, #id, #mc, #ms, #exp")
		maps.Copy(in.ExpressionAttributeNames, map[string]string{"#id": attrID, "#mc": attrMarkClass, "#ms": attrMarkShared, "#exp": attrExpiresAtMs})
	}
	var err error
	qerr := s.query(ctx, in, "read outcomes", func(it item) bool {
		if id := getS(it, attrID); id == outcomeMarkerID || strings.HasPrefix(id, domainCountPrefix) {
			return true
		}
		err = each(it)
		return err == nil
	})
	return cmp.Or(qerr, err)
}

// outcomeFrom reads an outcome item; ok is false if it expired or is a mark.
func outcomeFrom(it item, now time.Time) (evs.Outcome, bool) {
	if getN(it, attrExpiresAtMs) <= now.UnixMilli() || getS(it, attrOutcome) == "" {
		return evs.Outcome{}, false
	}
	o := evs.Outcome{
		Address: getS(it, attrOutAddress), Kind: evs.OutcomeKind(getS(it, attrOutcome)),
		At:         time.UnixMilli(getN(it, attrOutAtMs)).UTC(),
		BounceType: getS(it, attrBounceType), SMTPReply: getS(it, attrSMTPReply),
		Verdict: evs.Status(getS(it, attrVerdict)),
	}
	if o.Verdict != "" {
		o.Score = int(getN(it, attrScore))
	}
	return o, true
}

// LastVerdicts returns each address's latest cached decision, in either mode.
func (s *Store) LastVerdicts(ctx context.Context, accountID string, addresses []string) (map[string]evs.Decision, error) {
	var keys []item
	for _, a := range slices.Compact(slices.Sorted(slices.Values(addresses))) {
		keys = append(keys, cacheKey(accountID, evs.ModeFull, a), cacheKey(accountID, evs.ModeQuick, a))
	}
	items, err := s.getAll(ctx, s.t.Results, keys, nil, "read the result cache")
	if err != nil {
		return nil, err
	}
	out := map[string]evs.Decision{}
	prefix := cachePartitionPrefix + accountID + "#"
	for _, it := range items {
		// "<prefix><mode>#<address>"
		_, a, ok := strings.Cut(strings.TrimPrefix(getS(it, attrBatchID), prefix), "#")
		if !ok {
			continue
		}
		d, err := store.DecodeDecision(a, getB(it, attrDecision))
		if err != nil {
			return nil, err
		}
		if prev, ok := out[a]; !ok || d.CheckedAt.After(prev.CheckedAt.Time) {
			out[a] = d
		}
	}
	return out, nil
}
