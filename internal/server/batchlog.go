package server

import (
	"log/slog"
	"sync"

	"github.com/evs-dev/evs/internal/evs"
)

// batchLog writes the operator's lines about batches: one per state
// change, and one each time a running batch passes another tenth of its
// addresses. Never an address.
type batchLog struct {
	logger *slog.Logger

	mu sync.Mutex
	// tenths is the last tenth logged of each running batch; an entry
	// goes when its batch ends, so the map holds the batches running now.
	tenths map[string]int
}

// written is the store's OnStateChange hook. Hooks of one batch may run in
// any order: a progress line is logged only for a tenth past the last one.
func (l *batchLog) written(b evs.Batch, from evs.State) {
	attrs := []any{slog.String("batchId", b.ID), slog.String("accountId", b.AccountID),
		slog.Int("total", b.Counters.Total), slog.Int("processed", b.Counters.Processed)}
	l.mu.Lock()
	defer l.mu.Unlock()
	if b.State == from {
		if l.passedTenth(b) {
			l.logger.Info("batch progress", attrs...)
		}
		return
	}
	if b.State.Final() {
		delete(l.tenths, b.ID)
	}
	attrs = append(attrs, slog.String("from", string(from)), slog.String("to", string(b.State)))
	if b.Error != "" {
		attrs = append(attrs, slog.String("error", b.Error))
	}
	l.logger.Info("batch", attrs...)
}

// passedTenth tells whether b's counters reached a tenth of its addresses
// not logged yet (the last tenth is the completion's line); the caller
// holds mu.
func (l *batchLog) passedTenth(b evs.Batch) bool {
	n := b.Counters.Total - b.Counters.Duplicates
	if n <= 0 || b.State.Final() {
		return false
	}
	t := b.Counters.Processed * 10 / n
	if t <= 0 || t >= 10 || t <= l.tenths[b.ID] {
		return false
	}
	l.tenths[b.ID] = t
	return true
}
