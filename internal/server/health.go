package server

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
)

// HealthPath is the health check of `evs serve`, outside the API's routes:
// 200 while the store answers, 503 "unavailable" while it does not.
const HealthPath = "/healthz"

// healthTimeout bounds the store check: a load balancer's own timeout is
// typically a few seconds, and a store that takes longer is not healthy.
const healthTimeout = 2 * time.Second

// Pinger is a store that can say cheaply whether it answers
// (sqlitestore.Store is one); other stores are asked to count accounts.
type Pinger interface {
	Ping(ctx context.Context) error
}

// healthCheck returns the store check of the health endpoint.
func healthCheck(st Store) func(ctx context.Context) error {
	if st == nil {
		return func(context.Context) error { return nil }
	}
	if p, ok := st.(Pinger); ok {
		return p.Ping
	}
	return func(ctx context.Context) error {
		_, err := st.CountAccounts(ctx)
		return err
	}
}

// health answers HealthPath.
func (g *edge) health(w http.ResponseWriter, r *http.Request) {
	g.checkReply(w, r, routed(r, HealthPath), g.ping, nil)
}

// checkReply answers a check endpoint with check's verdict, bounded by
// healthTimeout: 200, or 503 with the status its error names (statusOf)
// and Retry-After. detail, when set, adds its object as "egress".
func (g *edge) checkReply(w http.ResponseWriter, r *http.Request, c *api.Call, check func(ctx context.Context) error, detail func() any) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Type", "application/json")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		w.WriteHeader(http.StatusMethodNotAllowed)
		_, _ = w.Write(api.ErrorBody(evs.CodeMethodNotAllowed, "Use GET.", c.RequestID))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
	defer cancel()
	status, word := http.StatusOK, "ok"
	if err := check(ctx); err != nil {
		c.Err = err
		status, word = http.StatusServiceUnavailable, statusOf(err)
		h.Set("Retry-After", "5")
	}
	body := []byte(`{"status":"` + word + `"}`)
	if detail != nil {
		body, _ = json.Marshal(struct {
			Status string `json:"status"`
			Egress any    `json:"egress"`
		}{word, detail()})
	}
	w.WriteHeader(status)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}
