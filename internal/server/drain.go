package server

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/evs-dev/evs/internal/config"
)

// drain stops srv: /readyz answers 503 at once, the listener stays open
// while calls are in flight, then closes, and the calls still running get
// what is left of Config.DrainTimeout before their connections are closed.
func (s *Server) drain(srv *http.Server) error {
	timeout := cmp.Or(s.opts.Config.DrainTimeout, config.DefaultDrainTimeout)
	if timeout < 0 {
		s.edge.draining.Store(true)
		s.opts.Logger.Info("shutting down without draining (EVS_DRAIN_TIMEOUT=0)")
		return srv.Close()
	}
	s.opts.Logger.Info("shutting down: /readyz answers 503; draining calls in flight", slog.Duration("timeout", timeout))
	deadline := time.Now().Add(timeout)
	s.edge.drain(deadline)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("server: calls still in flight after EVS_DRAIN_TIMEOUT (%v) were cut off: %w", timeout, err)
	}
	return nil
}
