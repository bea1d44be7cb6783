package verify

import (
	"cmp"
	"context"
	"fmt"

	"github.com/evs-dev/evs/internal/evs"
)

// History is what an account reported about one address: its outcomes,
// in any order, and the counts learned for its domain, as plain data, so
// the engine needs no store.
type History struct {
	Outcomes []evs.Outcome
	// Domain counts the outcomes reported for the address's domain, in
	// DomainScope (evs.DomainScopeAccount or evs.DomainScopeShared).
	Domain      evs.DomainCounts
	DomainScope string
}

// UsesDomainCounts tells whether ApplyHistory could use the counts
// learned for d's domain: only an accept-all or unchecked mailbox's score
// moves with them, as when the mailbox itself is unproven, mail sent to
// the domain's other addresses is the best evidence there is. A caller
// skips the lookup otherwise.
func UsesDomainCounts(d evs.Decision) bool {
	return d.Reason == evs.ReasonAcceptAll || d.Reason == evs.ReasonMailboxNotChecked
}

// ApplyHistory is the one rule by which reported outcomes change a
// decision, applied by both /v1/verify and the batch worker to the
// decision they return, fresh or cached (the cache keeps decisions
// without history):
//
//  1. A hard bounce later than the address's last delivery (or with none)
//     makes the verdict undeliverable/known_bounce, with the bounce in
//     checks.history, unless the checks already found it undeliverable
//     (the bounce is then noted). A fresh SMTP acceptance does not undo
//     it; only a later delivery does.
//  2. Else a delivery later than any hard bounce, for an address with
//     reason accept_all, makes it deliverable/accepted_email: mail really
//     arrived, which the server's 250 alone could not show.
//  3. Anything else leaves the verdict as it is and notes the latest
//     outcome in checks.history (result "noted").
//
// Then, when the verdict is still an accept-all or unchecked mailbox and
// the domain has learned counts, they go into checks.domainHistory, from
// which Score moves the score (docs/score.md). With no outcomes and no
// counts d is returned unchanged.
func ApplyHistory(d evs.Decision, h History) evs.Decision {
	d = applyAddressHistory(d, h.Outcomes)
	if UsesDomainCounts(d) && !h.Domain.Zero() {
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
// several at one instant does not depend on their order.
func later(a, b *evs.Outcome) bool {
	if !a.At.Equal(b.At) {
		return a.At.After(b.At)
	}
	return a.Kind > b.Kind
}

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

// HistorySource is where reported outcomes are kept (store.Outcomes).
type HistorySource interface {
	AddressOutcomes(ctx context.Context, accountID string, addresses []string) (map[string][]evs.Outcome, error)
	DomainCounts(ctx context.Context, accountID string, domains []string, shared bool) (map[string]evs.DomainCounts, error)
}

// WithHistory looks up the account's outcomes of the decisions'
// addresses and, where UsesDomainCounts, the counts of their domains
// (shared: every account's), one lookup of each for the whole list, and
// applies them by ApplyHistory, in place: one path from the store to the
// verdict for /v1/verify and the batch worker.
//
// A fault reading either is returned, for the caller to log, and leaves
// what it would have applied out: a verdict without its history is better
// than none.
func WithHistory(ctx context.Context, src HistorySource, accountID string, shared bool, ds []evs.Decision) error {
	addrs := make([]string, 0, len(ds))
	var domains []string
	seen := map[string]bool{}
	for _, d := range ds {
		if d.Normalized == "" {
			continue
		}
		addrs = append(addrs, d.Normalized)
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
