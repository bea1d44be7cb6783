package batch

import (
	"context"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// What the tests of package batch_test use beside the package's API.

// VerifyGroup runs one group's SMTP sessions, one after another: see
// VerifyGroupWith.
func (p *Processor) VerifyGroup(ctx context.Context, startBy time.Time, test bool, mode evs.Mode, g Group, attempt int) (Outcome, error) {
	return p.VerifyGroupWith(ctx, startBy, test, mode, g, attempt, nil)
}
