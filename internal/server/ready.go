package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// ReadyPath is the readiness check of `evs serve`, without a key: 200
// while the server takes work, 503 "draining" once told to stop, 503
// "unavailable" while its store does not take writes.
const ReadyPath = "/readyz"

// errDraining is the readiness verdict of a server told to stop.
var errDraining = errors.New("draining: the server was told to stop")

const (
	// readyReuse is how long a write probe's verdict answers further
	// checks: checks without a key must not become writes as fast.
	readyReuse = time.Second
	// probeLimit bounds one write probe, which outlives the check that
	// started it so the next check learns how it ended.
	probeLimit = 30 * time.Second
)

// WriteProber is a store that can say whether it takes writes now
// (sqlitestore.Store is one); a store that cannot is asked Ping (or to
// count accounts) instead.
type WriteProber interface {
	ProbeWrite(ctx context.Context) error
}

// writable runs at most one write probe at a time and lets its verdict
// answer the checks of the next readyReuse.
type writable struct {
	probe func(ctx context.Context) error
	now   func() time.Time
	// failed, if set, is told of each probe that failed (metrics).
	failed func()

	mu      sync.Mutex
	running chan struct{} // closed when the probe in flight ends; nil when none is
	err     error         // the last probe's verdict
	at      time.Time     // when it ended
}

func newWritable(st Store, now func() time.Time, failed func()) *writable {
	if now == nil {
		now = time.Now
	}
	w := &writable{probe: healthCheck(st), now: now, failed: failed}
	if p, ok := st.(WriteProber); ok {
		w.probe = p.ProbeWrite
	}
	return w
}

// check returns the verdict of a probe that ended less than readyReuse
// ago, else of the probe in flight or a new one, waiting at most until ctx
// ends.
func (w *writable) check(ctx context.Context) error {
	w.mu.Lock()
	if w.running == nil && !w.at.IsZero() && w.now().Sub(w.at) < readyReuse {
		err := w.err
		w.mu.Unlock()
		return err
	}
	if w.running == nil {
		done := make(chan struct{})
		w.running = done
		go func() {
			pctx, cancel := context.WithTimeout(context.Background(), probeLimit)
			err := w.probe(pctx)
			cancel()
			if err != nil && w.failed != nil {
				w.failed()
			}
			w.mu.Lock()
			w.err, w.at, w.running = err, w.now(), nil
			w.mu.Unlock()
			close(done)
		}()
	}
	done := w.running
	w.mu.Unlock()
	select {
	case <-done:
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.err
	case <-ctx.Done():
		return fmt.Errorf("the store took no write within %v: %w", healthTimeout, ctx.Err())
	}
}

// ready answers ReadyPath.
func (g *edge) ready(w http.ResponseWriter, r *http.Request) {
	g.checkReply(w, r, routed(r, ReadyPath), func(ctx context.Context) error {
		if g.draining.Load() {
			return errDraining
		}
		if g.lowOnSpace() {
			return errLowSpace
		}
		return g.writable.check(ctx)
	}, g.egressDetail)
}

// egressDetail is the "egress" object of /readyz's body: what the server
// knows of how receivers see its egress (egress.go); nil without a watch.
func (g *edge) egressDetail() any {
	if g.egress == nil {
		return nil
	}
	return g.egress.report()
}

// statusOf is the status a check endpoint's 503 names for err.
func statusOf(err error) string {
	if errors.Is(err, errDraining) {
		return "draining"
	}
	return "unavailable"
}

// drain marks the server as stopping (/readyz turns 503), then waits until
// no call is in flight or deadline passes. The listener stays open: a
// balancer that has not seen /readyz fail still gets its calls served.
func (g *edge) drain(deadline time.Time) {
	g.draining.Store(true)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for g.inflight.Load() > 0 && time.Now().Before(deadline) {
		<-t.C
	}
}
