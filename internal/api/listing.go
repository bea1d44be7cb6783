package api

import (
	"context"
	"net/http"
	"time"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
)

// listItem is one batch of GET /v1/requests: the batch envelope of GET
// /v1/requests/{id} without replayed, which belongs to a call, not to a
// batch. callbackUrl and callback are left out too: they cost a read per
// batch, and GET /v1/requests/{id} shows them.
type listItem struct {
	Request  batchRequest `json:"request"`
	Counters Counters     `json:"counters"`
}

type listPage struct {
	Requests   []listItem `json:"requests"`
	NextCursor *string    `json:"nextCursor"`
}

// listCursor is the opaque position of a batch-list page: the CreatedAt (in
// nanoseconds, so that no store's precision is lost) and ID of the batch
// listed last. The list runs newest first, so a batch created later comes
// before it and never shifts the pages after it.
type listCursor struct {
	Created int64  `json:"t"`
	ID      string `json:"i"`
}

// listBatches answers GET /v1/requests: the account's batches, newest
// first, a page at a time (contract, section 13).
func (h *Handler) listBatches(ctx context.Context, req *request, p evs.Principal) (idempotency.Reply, error) {
	q := req.query
	for k := range q {
		if k != "limit" && k != "cursor" {
			return idempotency.Reply{}, evs.Errorf(evs.CodeInvalidRequest, "Unknown query parameter %q.", k)
		}
	}
	limit, err := parseLimit(q)
	if err != nil {
		return idempotency.Reply{}, err
	}
	var after evs.BatchPos
	if s, ok := q["cursor"]; ok {
		var c listCursor
		if !decodeToken(s, &c) || c.ID == "" {
			return idempotency.Reply{}, errBadCursor()
		}
		after = evs.BatchPos{CreatedAt: time.Unix(0, c.Created).UTC(), ID: c.ID}
	}
	// One more than the page tells whether another page follows, so the
	// last page says so (nextCursor null) instead of a client asking for
	// an empty one.
	bs, err := h.d.Batches.ListBatches(ctx, p.AccountID, after, limit+1)
	if err != nil {
		return idempotency.Reply{}, err
	}
	out := listPage{Requests: make([]listItem, 0, min(len(bs), limit))}
	if len(bs) > limit {
		bs = bs[:limit]
		last := bs[limit-1]
		next := encodeCursor(listCursor{Created: last.CreatedAt.UnixNano(), ID: last.ID})
		out.NextCursor = &next
	}
	for _, b := range bs {
		e := envelopeOf(b, false)
		out.Requests = append(out.Requests, listItem{Request: e.Request, Counters: e.Counters})
	}
	return jsonReply(http.StatusOK, out), nil
}
