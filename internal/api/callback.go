package api

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
)

// Callbacks are the handlers' webhook dependencies (contract, section 10).
type Callbacks struct {
	// Egress decides which http:// callback URLs are allowed (hosts
	// inside EVS_EGRESS_ALLOW); nil allows https only.
	Egress *config.EgressPolicy
	// Deliveries shows a final batch's delivery in its envelope; nil
	// shows none.
	Deliveries interface {
		Delivery(ctx context.Context, accountID, batchID string) (evs.Delivery, error)
	}
	// Finalized is told when a handler makes a batch final (cancel), so a
	// deliverer without its own polling (the SQS worker) starts at once.
	Finalized func(ctx context.Context, b evs.Batch)
}

// callback is request.callback of the batch envelope.
type callback struct {
	State      evs.CallbackState `json:"state"`
	Attempts   int               `json:"attempts"`
	LastStatus *int              `json:"lastStatus"`
}

func (h *Handler) checkCallback(url string) error {
	if url == "" {
		return nil
	}
	if err := h.d.Egress.CheckURL(url); err != nil {
		return evs.Errorf(evs.CodeInvalidRequest, "The callbackUrl %v.", err)
	}
	return nil
}

// withCallback adds callbackUrl and callback to the envelope of a final
// batch that has a delivery. A store fault leaves them out rather than
// failing a read that has everything else.
func (h *Handler) withCallback(ctx context.Context, accountID string, e batchEnvelope) batchEnvelope {
	if h.d.Deliveries == nil || !e.Request.State.Final() {
		return e
	}
	d, err := h.d.Deliveries.Delivery(ctx, accountID, e.Request.ID)
	if err != nil {
		if evs.ErrorCode(err) != evs.CodeNotFound {
			h.d.Logger.WarnContext(ctx, "could not read a webhook delivery", slog.String("batchId", e.Request.ID), slog.String("error", err.Error()))
		}
		return e
	}
	return withDelivery(e, d)
}

// withDelivery adds callbackUrl and callback from d to the envelope.
func withDelivery(e batchEnvelope, d evs.Delivery) batchEnvelope {
	e.Request.CallbackURL = d.URL
	e.Request.Callback = &callback{State: d.State, Attempts: d.Attempts}
	if d.LastStatus != 0 {
		e.Request.Callback.LastStatus = &d.LastStatus
	}
	return e
}

// webhookEvent is the body of a batch's webhook event (contract, section
// 10). Its request is the batch envelope's, so the two cannot drift apart.
type webhookEvent struct {
	Type      string   `json:"type"`
	Timestamp evs.Time `json:"timestamp"`
	Data      struct {
		Request  batchRequest `json:"request"`
		Counters Counters     `json:"counters"`
	} `json:"data"`
}

// EventBody is the body of the webhook event of final batch b. Its
// timestamp is the moment b became final, so every retry sends the same
// bytes (only the webhook-timestamp header changes).
func EventBody(b evs.Batch) []byte {
	e := webhookEvent{Type: "batch.completed", Timestamp: evs.Time{Time: b.CompletedAt}}
	switch b.State {
	case evs.StateCancelled:
		e.Type = "batch.cancelled"
	case evs.StateFailed:
		e.Type = "batch.failed"
	}
	env := envelopeOf(b, false)
	e.Data.Request, e.Data.Counters = env.Request, env.Counters
	out, _ := json.Marshal(e) // our own types: cannot fail
	return out
}
