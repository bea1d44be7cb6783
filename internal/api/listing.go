package api

import (
	"context"
	"net/http"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
)

// listItem is one batch of GET /v1/requests: the batch envelope without
// replayed (a call's) and the callback (a read per batch).
type listItem struct {
	Request  batchRequest `json:"request"`
	Counters Counters     `json:"counters"`
}

type listPage struct {
	Requests   []listItem `json:"requests"`
	NextCursor *string    `json:"nextCursor"`
}

// listCursor is the opaque position of a batch-list page: the CreatedAt (in
// nanoseconds) and ID of the batch listed last. Newest first, so a batch
// created later never shifts the pages after it.
type listCursor struct {
	Created int64  `json:"t"`
	ID      string `json:"i"`
	// States is the state filter the cursor was made for.
	States string `json:"s,omitempty"`
}

// batchStates are the states a list may be filtered on.
var batchStates = map[evs.State]bool{evs.StateQueued: true, evs.StateRunning: true, evs.StateCompleted: true, evs.StateCancelled: true, evs.StateFailed: true}

// listBatches answers GET /v1/requests: the account's batches, newest
// first, a page at a time, those in the states of state= when given.
// Filtered, a page reads at most pageScan batches, so it may hold fewer
// than limit while nextCursor still advances.
func (h *Handler) listBatches(ctx context.Context, req *request, p evs.Principal) (idempotency.Reply, error) {
	q := req.query
	for k := range q {
		if k != "limit" && k != "cursor" && k != "state" {
			return idempotency.Reply{}, evs.Errorf(evs.CodeInvalidRequest, "Unknown query parameter %q.", k)
		}
	}
	limit, err := parseLimit(q)
	if err != nil {
		return idempotency.Reply{}, err
	}
	var states map[evs.State]bool
	var stateKey string
	if s, ok := q["state"]; ok {
		if states, stateKey, err = labelSet(s, func(v evs.State) bool { return batchStates[v] },
			"The state filter must be queued, running, completed, cancelled or failed, or a comma-separated list of them."); err != nil {
			return idempotency.Reply{}, err
		}
	}
	var after evs.BatchPos
	if s, ok := q["cursor"]; ok {
		var c listCursor
		if !decodeToken(s, &c) || c.ID == "" || c.States != stateKey {
			return idempotency.Reply{}, errBadCursor()
		}
		after = evs.BatchPos{CreatedAt: time.Unix(0, c.Created).UTC(), ID: c.ID}
	}
	// One more than the page tells whether another page follows, so the
	// last page says so (nextCursor null) instead of a client asking for
	// an empty one.
	fetch := limit + 1
	if states != nil {
		fetch = MaxPageLimit
	}
	var kept []evs.Batch
	var next *evs.Batch // where the next page starts, when one may follow
	for scanned := 0; ; {
		bs, err := h.d.Batches.ListBatches(ctx, p.AccountID, after, fetch)
		if err != nil {
			return idempotency.Reply{}, err
		}
		for i := range bs {
			if states == nil || states[bs[i].State] {
				kept = append(kept, bs[i])
			}
			if len(kept) > limit {
				kept = kept[:limit]
				next = &kept[limit-1]
				break
			}
		}
		scanned += len(bs)
		if next != nil || len(bs) < fetch {
			break
		}
		last := bs[len(bs)-1]
		after = evs.BatchPos{CreatedAt: last.CreatedAt, ID: last.ID}
		if scanned >= pageScan {
			next = &last
			break
		}
	}
	out := listPage{Requests: make([]listItem, 0, len(kept))}
	if next != nil {
		c := encodeCursor(listCursor{Created: next.CreatedAt.UnixNano(), ID: next.ID, States: stateKey})
		out.NextCursor = &c
	}
	for _, b := range kept {
		e := h.withETA(envelopeOf(b, false), b)
		out.Requests = append(out.Requests, listItem{Request: e.Request, Counters: e.Counters})
	}
	return jsonReply(http.StatusOK, out), nil
}
