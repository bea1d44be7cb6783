package batch

import (
	"context"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// GreyFacts remembers, per domain, how long after greylisting us its
// server let a retry through (domainfacts.Memory is one, and
// dynamostore.DomainFacts on AWS). Greylisting is per sender and
// recipient, so every new address of such a domain is deferred again;
// what carries over is the server's delay. A first retry scheduled at that
// delay, instead of the back-off's first step, spends no session on a
// retry the server would defer again.
type GreyFacts interface {
	GreyDelay(ctx context.Context, domain string) (time.Duration, bool)
	KeepGreyDelay(ctx context.Context, domain string, d time.Duration)
}

// NextGreyDelay is the wait before attempt+1 of a group's greylisted
// items: GreyDelay's back-off, or for a live batch's first retry at a
// domain whose delay grey knows and is longer, that delay. `evs serve`'s
// runner and the SQS worker both schedule retries with it.
func NextGreyDelay(ctx context.Context, grey GreyFacts, base time.Duration, attempt int, test bool, domain string) time.Duration {
	d := GreyDelay(base, attempt+1, test)
	if attempt == 0 && !test && grey != nil && domain != "" {
		if learned, ok := grey.GreyDelay(ctx, domain); ok && learned > d {
			d = learned
		}
	}
	return d
}

// LearnGrey remembers in grey the wait that let a live retry through:
// some item of a retried group (attempt > 0) of domain got an answer other
// than greylisted after waiting waited since the group's first deferral.
func LearnGrey(ctx context.Context, grey GreyFacts, attempt int, test bool, domain string, waited time.Duration, rs []evs.Result) {
	if attempt == 0 || test || grey == nil || domain == "" {
		return
	}
	for _, res := range rs {
		if !res.Decision.Cached && res.Decision.Checks.SMTP.Code != 0 && res.Decision.Checks.SMTP.Result != evs.SMTPGreylisted {
			grey.KeepGreyDelay(ctx, domain, waited)
			return
		}
	}
}

// greyDelay is NextGreyDelay for a task of the runner.
func (r *Runner) greyDelay(br *batchRun, t task) time.Duration {
	return NextGreyDelay(br.ctx, r.cfg.Grey, r.cfg.GreyBackoff, t.attempt, br.test, t.group.Domain)
}

// learnGrey is LearnGrey for a task of the runner.
func (r *Runner) learnGrey(br *batchRun, t task, rs []evs.Result) {
	LearnGrey(br.ctx, r.cfg.Grey, t.attempt, br.test, t.group.Domain, t.waited, rs)
}
