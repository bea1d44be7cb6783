package store

import (
	"context"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// Outcomes stores what the accounts reported about their mail: per account,
// normalised address, kind and time, each kept until its expiry and never
// returned after.
type Outcomes interface {
	// PutOutcomes stores each outcome of os that the account has not
	// stored yet, with expiresAt; one already stored under the same
	// natural key (Address, Kind, At to the millisecond) is left as it
	// is, the first report's verdict and reply kept. It returns how many
	// were new. os holds no two outcomes with the same natural key.
	PutOutcomes(ctx context.Context, accountID string, os []evs.Outcome, expiresAt time.Time) (added int, err error)
	// AddressOutcomes returns the account's outcomes for each of the
	// normalised addresses that has any, in no particular order.
	AddressOutcomes(ctx context.Context, accountID string, addresses []string) (map[string][]evs.Outcome, error)
	// DeleteOutcomes deletes every outcome the account stored for the
	// normalised address and returns how many there were.
	DeleteOutcomes(ctx context.Context, accountID, address string) (int, error)
	// EachOutcome calls fn with each of the account's outcomes, in no
	// particular order, until fn returns an error, which it returns.
	EachOutcome(ctx context.Context, accountID string, fn func(evs.Outcome) error) error
	// LastVerdicts returns, for each normalised address of which the
	// account's result cache (section 12) still holds a decision, in
	// either mode and expired or not, the one checked last: the verdict
	// the account was given, for the outcome report.
	LastVerdicts(ctx context.Context, accountID string, addresses []string) (map[string]evs.Decision, error)
	// DomainCounts returns, for each of the domains that has any, how
	// many of its addresses were reported delivered to and how many
	// bounced hard, each address once per kind (evs.DomainCounts): the
	// account's own, or with shared every account's
	// (EVS_OUTCOME_SHARE_DOMAINS). PutOutcomes and DeleteOutcomes keep
	// them in step: the first outcome of a kind for an address counts it,
	// until that outcome expires (a later one then counts it again);
	// deleting the address uncounts it. Counters are kept by DomainBucket:
	// an address leaves them at the end of the month its outcome expires
	// in, at most a month after it.
	DomainCounts(ctx context.Context, accountID string, domains []string, shared bool) (map[string]evs.DomainCounts, error)
}

// DomainCountKey names one counter of an account's domain counts: the
// domain, the end of its bucket (DomainBucket), and whether it is the
// account's part of the counts shared across accounts.
type DomainCountKey struct {
	Domain string
	Bucket time.Time
	Shared bool
}

// DomainDeltas adds up changes to an account's domain counts, for a store
// to write once per counter: the account's own (Shared false) and its part
// of the shared ones (Shared true).
type DomainDeltas map[DomainCountKey]evs.DomainCounts

// Add counts the address (by -1: uncounts it) in class, in the bucket of
// a mark expiring at expiresAt: in the account's own counts, and in the
// shared ones when its mark is shared (SharesOutcome).
func (m DomainDeltas) Add(address, class string, expiresAt time.Time, by int, shared bool) {
	k := DomainCountKey{evs.AddressDomain(address), DomainBucket(expiresAt), false}
	c := m[k]
	if !c.Add(class, by) {
		return
	}
	m[k] = c
	if shared {
		k.Shared = true
		c = m[k]
		c.Add(class, by)
		m[k] = c
	}
}

// SharesOutcome is the rule by which one account's outcomes move the
// domain counts shared across accounts: only when the account had verified
// the address before (the outcome carries its verdict), so made-up reports
// of addresses it never verified move only its own counts. Both stores keep
// the answer with the mark, to uncount it later.
func SharesOutcome(o evs.Outcome) bool { return o.Verdict != "" }

// DomainBucket is the end of the bucket of domain counters an outcome
// expiring at expiresAt is counted in: the first instant of the next
// month, UTC, which keeps the counters few yet expiring close to the
// outcomes.
func DomainBucket(expiresAt time.Time) time.Time {
	t := expiresAt.UTC()
	return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
}
