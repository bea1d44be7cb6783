package batch

import (
	"context"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// GreyFacts remembers, per domain, how long after greylisting us its
// server let a retry through (domainfacts.Memory is one). Greylisting is
// per sender and recipient, so every new address of such a domain is
// deferred again; what carries over is the server's delay. A first retry
// scheduled at that delay, instead of the back-off's first step, spends no
// session on a retry the server would defer again.
type GreyFacts interface {
	GreyDelay(ctx context.Context, domain string) (time.Duration, bool)
	KeepGreyDelay(ctx context.Context, domain string, d time.Duration)
}

// greyDelay is the wait before the next attempt of a task's greylisted
// items: GreyDelay's back-off, or for a live batch's first retry at a
// domain whose delay is known and longer, that delay.
func (r *Runner) greyDelay(br *batchRun, t task) time.Duration {
	d := GreyDelay(r.cfg.GreyBackoff, t.attempt+1, br.test)
	if t.attempt == 0 && !br.test && r.cfg.Grey != nil && t.group.Domain != "" {
		if learned, ok := r.cfg.Grey.GreyDelay(br.ctx, t.group.Domain); ok && learned > d {
			d = learned
		}
	}
	return d
}

// learnGrey remembers the wait that let a live retry through: some item
// of a retried group got an answer other than greylisted after waiting
// t.waited since the first deferral.
func (r *Runner) learnGrey(br *batchRun, t task, rs []evs.Result) {
	if t.attempt == 0 || br.test || r.cfg.Grey == nil || t.group.Domain == "" {
		return
	}
	for _, res := range rs {
		if !res.Decision.Cached && res.Decision.Checks.SMTP.Code != 0 && res.Decision.Checks.SMTP.Result != evs.SMTPGreylisted {
			r.cfg.Grey.KeepGreyDelay(br.ctx, t.group.Domain, t.waited)
			return
		}
	}
}
