package verify

import (
	"cmp"
	"context"
	"fmt"

	"github.com/evs-dev/evs/internal/evs"
)

// History is what an account reported about one address (contract,
// section 18): its outcomes, in any order, and the counts learned for its
// domain. The caller looks them up in its store and passes them in as
// plain data, so the engine needs no store.
type History struct {
	Outcomes []evs.Outcome
	// Domain counts the outcomes reported for the address's domain, in
	// DomainScope (evs.DomainScopeAccount, or evs.DomainScopeShared when
	// the operator shares them across accounts). The caller need only
	// look them up when UsesDomainCounts says they matter.
	Domain      evs.DomainCounts
	DomainScope string
}

// UsesDomainCounts tells whether ApplyHistory could use the counts
// learned for d's domain: only an accept-all or unchecked mailbox's score
// moves with them, and the address's own outcomes never turn another
// verdict into one of those. A caller skips the lookup otherwise.
func UsesDomainCounts(d evs.Decision) bool {
	return learnsFromDomain(d.Reason)
}

// ApplyHistory is the one rule by which reported outcomes change a
// decision, applied by both /v1/verify and the batch worker to the
// decision they are about to return, whether fresh or reused from the
// cache (the cache keeps decisions without history, so an outcome takes
// effect at the next answer):
//
//  1. A hard bounce later than the address's last delivery (or with no
//     delivery at all) makes the verdict undeliverable/known_bounce, with
//     the bounce's date and reply in checks.history, unless the checks
//     already found it undeliverable (their own reason stands, the bounce
//     is noted). A fresh SMTP acceptance does not undo it: accepting at
//     RCPT and bouncing later is exactly what the bounce reported. Only a
//     later delivery does.
//  2. Else a delivery later than any hard bounce, for an address on an
//     accept-all domain (reason accept_all, so also an accepted mailbox
//     whose random-address probe was inconclusive), makes it
//     deliverable/accepted_email with "delivered on …" in checks.history:
//     mail really arrived, which the server's 250 alone could not show.
//  3. Anything else leaves the verdict as it is and notes the latest
//     outcome in checks.history (result "noted"). Soft bounces, complaints
//     and deferrals never make a verdict undeliverable.
//
// Then, when the verdict is still an accept-all or unchecked mailbox and
// the domain has learned counts, they go into checks.domainHistory, from
// which Score moves the score (docs/score.md): the verdict's status stays.
//
// With no outcomes and no counts d is returned unchanged: checks.history
// and checks.domainHistory stay absent. The score follows from the
// evidence (Score: known_bounce and a delivered accept-all address have
// rows of their own).
func ApplyHistory(d evs.Decision, h History) evs.Decision {
	d = applyAddressHistory(d, h.Outcomes)
	if learnsFromDomain(d.Reason) && !h.Domain.Zero() {
		d.Checks.DomainHistory = &evs.DomainHistoryCheck{Scope: cmp.Or(h.DomainScope, evs.DomainScopeAccount), DomainCounts: evs.DomainCounts{
			Delivered: max(h.Domain.Delivered, 0), HardBounces: max(h.Domain.HardBounces, 0)}}
		d.Score = Score(d)
	}
	return d
}

// applyAddressHistory applies rules 1–3 of ApplyHistory.
func applyAddressHistory(d evs.Decision, outcomes []evs.Outcome) evs.Decision {
	if len(outcomes) == 0 {
		return d
	}
	var bounce, delivery, latest *evs.Outcome
	for i := range outcomes {
		o := &outcomes[i]
		if latest == nil || later(o, latest) {
			latest = o
		}
		switch {
		case o.HardBounce():
			if bounce == nil || o.At.After(bounce.At) {
				bounce = o
			}
		case o.Kind == evs.OutcomeDelivered:
			if delivery == nil || o.At.After(delivery.At) {
				delivery = o
			}
		}
	}
	switch {
	case bounce != nil && (delivery == nil || bounce.At.After(delivery.At)):
		if d.Status() == evs.Undeliverable {
			d.Checks.History = historyCheck(evs.HistoryNoted, *bounce)
			break
		}
		d.Reason = evs.ReasonKnownBounce
		d.Checks.History = historyCheck(evs.HistoryKnownBounce, *bounce)
	case delivery != nil && d.Reason == evs.ReasonAcceptAll:
		d.Reason = evs.ReasonAcceptedEmail
		d.Checks.History = historyCheck(evs.HistoryDelivered, *delivery)
	default:
		d.Checks.History = historyCheck(evs.HistoryNoted, *latest)
	}
	d.Score = Score(d)
	return d
}

// later orders outcomes by time, then by kind, so that the latest of
// several at the same instant is the same whatever order they came in.
func later(a, b *evs.Outcome) bool {
	if !a.At.Equal(b.At) {
		return a.At.After(b.At)
	}
	return a.Kind > b.Kind
}

// historyCheck is the checks.history evidence of o for result.
func historyCheck(result string, o evs.Outcome) *evs.HistoryCheck {
	day := o.At.UTC().Format("2006-01-02")
	var detail string
	switch {
	case o.HardBounce():
		detail = "hard bounce on " + day
	case o.Kind == evs.OutcomeBounced && o.BounceType == evs.BounceSoft:
		detail = "soft bounce on " + day
	case o.Kind == evs.OutcomeBounced:
		detail = "bounce on " + day
	default:
		detail = string(o.Kind) + " on " + day
	}
	return &evs.HistoryCheck{
		Result: result, Outcome: o.Kind, At: evs.Time{Time: o.At.UTC()},
		BounceType: o.BounceType, SMTPReply: o.SMTPReply, Detail: detail,
	}
}

// HistorySource is where reported outcomes are kept (both stores;
// store.Outcomes): what WithHistory reads.
type HistorySource interface {
	AddressOutcomes(ctx context.Context, accountID string, addresses []string) (map[string][]evs.Outcome, error)
	DomainCounts(ctx context.Context, accountID string, domains []string, shared bool) (map[string]evs.DomainCounts, error)
}

// WithHistory looks up the account's outcomes of the decisions' addresses
// and, for accept-all and unchecked mailboxes, the counts of their
// domains (shared: every account's, EVS_OUTCOME_SHARE_DOMAINS), one
// lookup of each for the whole list, and applies them by ApplyHistory, in
// place. /v1/verify (one decision) and the batch worker (a step's
// results) both call it: one path from the store to the verdict.
//
// A fault reading the addresses' outcomes leaves ds as they are; one
// reading the counts leaves the scores the evidence's own, the addresses'
// outcomes still applied. Either is returned, for the caller to log: a
// verdict without its history is the one evs gave before outcomes
// existed, better than none.
func WithHistory(ctx context.Context, src HistorySource, accountID string, shared bool, ds []evs.Decision) error {
	addrs := make([]string, 0, len(ds))
	var domains []string
	seen := map[string]bool{}
	for _, d := range ds {
		if d.Normalized == "" {
			continue
		}
		addrs = append(addrs, d.Normalized)
		// Only an accept-all or unchecked mailbox's score uses its
		// domain's counts: the others' domains are not looked up.
		if dom := evs.AddressDomain(d.Normalized); UsesDomainCounts(d) && !seen[dom] {
			seen[dom] = true
			domains = append(domains, dom)
		}
	}
	if len(addrs) == 0 {
		return nil
	}
	got, err := src.AddressOutcomes(ctx, accountID, addrs)
	if err != nil {
		return fmt.Errorf("read the addresses' outcomes: %w", err)
	}
	var counts map[string]evs.DomainCounts
	var countsErr error
	if len(domains) > 0 {
		if counts, err = src.DomainCounts(ctx, accountID, domains, shared); err != nil {
			counts, countsErr = nil, fmt.Errorf("read the domains' outcome counts: %w", err)
		}
	}
	scope := evs.DomainScopeAccount
	if shared {
		scope = evs.DomainScopeShared
	}
	for i, d := range ds {
		if d.Normalized == "" {
			continue
		}
		h := History{Outcomes: got[d.Normalized]}
		if UsesDomainCounts(d) {
			h.Domain, h.DomainScope = counts[evs.AddressDomain(d.Normalized)], scope
		}
		if len(h.Outcomes) > 0 || !h.Domain.Zero() {
			ds[i] = ApplyHistory(d, h)
		}
	}
	return countsErr
}
