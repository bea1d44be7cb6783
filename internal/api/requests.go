package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/store"
	"github.com/evs-dev/evs/internal/verify"
)

// Limits of batch creation.
const (
	// MaxBatchBody is the contract's body limit, `evs serve`'s.
	MaxBatchBody = 6 << 20
	// LambdaMaxBatchBody is the body limit on AWS. Lambda takes at most
	// 6 MiB per synchronous event, and API Gateway base64-encodes every
	// body (BinaryMediaTypes */*): 4 MiB becomes 5,592,408 bytes, which
	// leaves room for the envelope (see docs/aws.md for the sum).
	LambdaMaxBatchBody = 4 << 20

	MaxBatchAddresses = 50000
	DefaultPageLimit  = 100
	MaxPageLimit      = 1000
)

// batchEnvelope is the batch object of the contract.
type batchEnvelope struct {
	Request  batchRequest `json:"request"`
	Counters Counters     `json:"counters"`
	Replayed bool         `json:"replayed"`
}

type batchRequest struct {
	ID          string    `json:"id"`
	Mode        evs.Mode  `json:"mode"`
	State       evs.State `json:"state"`
	Error       string    `json:"error,omitempty"`
	CreatedAt   evs.Time  `json:"createdAt"`
	CompletedAt *evs.Time `json:"completedAt,omitempty"`
	CallbackURL string    `json:"callbackUrl,omitempty"`
	Callback    *callback `json:"callback,omitempty"`
	Name        string    `json:"name,omitempty"`
	// While the batch is unfinished: when its time runs out, and when it
	// should be done at the earliest (eta.go).
	DeadlineAt            *evs.Time `json:"deadlineAt,omitempty"`
	EstimatedCompletionAt *evs.Time `json:"estimatedCompletionAt,omitempty"`
}

func envelopeOf(b evs.Batch, replayed bool) batchEnvelope {
	e := batchEnvelope{
		Request: batchRequest{
			ID: b.ID, Mode: b.Mode, State: b.State, Error: b.Error,
			CreatedAt: evs.Time{Time: b.CreatedAt}, Name: b.Name,
		},
		Counters: Counters(b.Counters),
		Replayed: replayed,
	}
	if b.State.Final() && !b.CompletedAt.IsZero() {
		e.Request.CompletedAt = &evs.Time{Time: b.CompletedAt}
	}
	return e
}

func batchPath(id string) string { return "/v1/requests/" + id }

// canonicalUUID is id, the UUID called what, in canonical form: only the
// 36-character form is one (uuid.Parse takes others too).
func canonicalUUID(id, what string) (string, error) {
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return "", evs.Errorf(evs.CodeInvalidRequest, "The %s must be a UUID.", what)
	}
	return u.String(), nil
}

// parsedBatch is a validated creation request: a list read from the body,
// or the ID of an upload to read it from.
type parsedBatch struct {
	mode        evs.Mode
	list        *addressList
	uploadID    string
	upload      evs.Upload // opened, of uploadSize bytes
	uploadSize  int64
	callbackURL string
	maxAge      time.Duration // as evs.Batch.MaxAge
	name        string
	layout      CSVLayout // a CSV list's column and delimiter, as named
}

// parseLayout reads the optional column and delimiter of a CSV list, from
// a JSON body's fields or a CSV body's query.
func parseLayout(fields map[string]string) (CSVLayout, error) {
	var l CSVLayout
	if column, ok := fields["column"]; ok {
		if strings.TrimSpace(column) == "" || len(column) > 200 {
			return l, evs.Errorf(evs.CodeInvalidRequest, "The column must be a header's name or a column's number (from 1), at most 200 bytes.")
		}
		if n, err := strconv.Atoi(column); err == nil && n < 1 {
			return l, evs.Errorf(evs.CodeInvalidRequest, "Column numbers start at 1.")
		}
		l.Column = column
	}
	if delimiter, ok := fields["delimiter"]; ok {
		d, ok := ParseDelimiter(delimiter)
		if !ok {
			return l, evs.Errorf(evs.CodeInvalidRequest, "The delimiter must be comma, semicolon, tab or pipe (or the character itself).")
		}
		l.Delimiter = d
	}
	return l, nil
}

// checkName refuses a batch name a listing could not show on one line.
func checkName(s string) error {
	switch {
	case strings.TrimSpace(s) == "":
		return evs.Errorf(evs.CodeInvalidRequest, "The name is empty.")
	case utf8.RuneCountInString(s) > evs.MaxBatchName:
		return evs.Errorf(evs.CodeInvalidRequest, "The name is longer than %d characters.", evs.MaxBatchName)
	case !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl):
		return evs.Errorf(evs.CodeInvalidRequest, "The name holds a control character or is not valid UTF-8.")
	}
	return nil
}

// addressList deduplicates a list as it is read, keeping only the distinct
// items: a list of a million addresses is never held twice.
type addressList struct {
	total int
	// seqs maps an address's dedup key to the seq of its first
	// occurrence: it decides duplicates, and a duplicate row names it.
	seqs  map[string]int32
	items []evs.Item
	rows  *rowSpool // when set, keeps the list's rows (rows.go)
	shape CSVShape  // how a CSV list with rows was written
}

// add checks the next address and keeps it unless it is a duplicate.
func (l *addressList) add(addr string) error {
	if err := checkEmail(addr, l.total); err != nil {
		return err
	}
	l.total++
	key, domain := dedupKey(addr)
	if l.seqs == nil {
		l.seqs = make(map[string]int32)
	}
	seq, dup := l.seqs[key]
	if !dup {
		seq = int32(len(l.items))
		l.seqs[key] = seq
		l.items = append(l.items, evs.Item{Seq: len(l.items), Email: addr, Domain: domain})
	}
	if r := l.rows; r != nil {
		r.last.seq, r.last.dup = int(seq), dup
	}
	return nil
}

func (h *Handler) createBatch(ctx context.Context, req *request, p evs.Principal) (idempotency.Reply, error) {
	in, err := h.parseBatch(req)
	if err != nil {
		return idempotency.Reply{}, err
	}
	defer in.list.rows.close()
	if err := h.checkCallback(in.callbackURL); err != nil {
		return idempotency.Reply{}, err
	}
	key, keyed := req.header("Idempotency-Key")
	ct, _ := req.header("Content-Type")
	found := false // made by an earlier call with the key whose reply was lost
	stored, replayed, err := h.idempotent(ctx, req, p, func(ctx context.Context) idempotency.Reply {
		var b evs.Batch
		var err error
		switch {
		case in.uploadID != "":
			b, err = h.storeUploadBatch(ctx, p, in)
		case keyed:
			scope := idempotency.Scope(p.AccountID, req.r.Method, req.r.URL.Path, key)
			b, found, err = h.storeKeyedBatch(ctx, p, in, scope, idempotency.Fingerprint(req.r.Method, req.r.URL.Path, ct, req.body))
		default:
			b, err = h.storeBatch(ctx, p, in, "")
		}
		if err != nil {
			return errReply(err)
		}
		// A found batch is stored as the first call's reply, and answered
		// below as a replay.
		r := jsonReply(http.StatusCreated, h.withETA(envelopeOf(b, false), b))
		r.Headers = map[string]string{"Location": batchPath(b.ID)}
		return r
	})
	if err != nil || !replayed && !found {
		return stored, err
	}
	// A replayed creation answers with the batch as it is now, named by
	// the stored reply's Location; a stored error is replayed as is.
	id, ok := strings.CutPrefix(stored.Headers["Location"], batchPath(""))
	if stored.StatusCode != http.StatusCreated || !ok {
		return stored, nil
	}
	b, err := h.d.Batches.Batch(ctx, p.AccountID, id)
	if err != nil {
		return idempotency.Reply{}, err
	}
	out := jsonReply(http.StatusOK, h.withCallback(ctx, p.AccountID, h.withETA(envelopeOf(b, true), b)))
	out.Headers = map[string]string{"Location": batchPath(b.ID), idempotency.ReplayedHeader: "true"}
	return out, nil
}

// keyedNamespace derives the ID of a batch created under an
// Idempotency-Key from the key's scope, the request's fingerprint and a
// generation, so a retry finds it whatever became of the first reply.
var keyedNamespace = uuid.MustParse("b3a6f0de-52c1-4c0e-9d7a-1f8e2c6b4a90")

// keyedBatchID is the ID of generation gen of a keyed creation's batch: a
// key used again once its record expired takes the next generation.
func keyedBatchID(scope, fingerprint string, gen int) string {
	return uuid.NewSHA1(keyedNamespace, []byte(scope+"\x00"+fingerprint+"\x00"+strconv.Itoa(gen))).String()
}

// maxGenerations bounds storeKeyedBatch's walk: a generation a day while
// batches are kept, plus one per retry refused while the queue was down.
const maxGenerations = 100

// unqueuedReason is the error of a batch that was stored but could not be
// queued: it failed before any work, so it is no call's effect.
const unqueuedReason = "the batch could not be queued"

// storeKeyedBatch stores the batch of a keyed creation under its derived
// ID, unless an earlier call with the same key and request made it within
// idempotency.Retention: then it returns that batch, found, and charges
// nothing (the first call's reply was lost, a full disk say).
func (h *Handler) storeKeyedBatch(ctx context.Context, p evs.Principal, in parsedBatch, scope, fingerprint string) (evs.Batch, bool, error) {
	now := h.d.Now()
	for gen := range maxGenerations {
		id := keyedBatchID(scope, fingerprint, gen)
		b, err := h.d.Batches.Batch(ctx, p.AccountID, id)
		switch {
		case evs.ErrorCode(err) == evs.CodeNotFound:
			b, err = h.storeBatch(ctx, p, in, id)
			if evs.ErrorCode(err) == evs.CodeInvalidState {
				// The ID exists after all: a call whose claim on the key
				// had gone stale created it meanwhile. It is the effect.
				b, err = h.d.Batches.Batch(ctx, p.AccountID, id)
				return b, err == nil, err
			}
			return b, false, err
		case err != nil:
			return evs.Batch{}, false, err
		case b.State == evs.StateFailed && b.Error == unqueuedReason, now.Sub(b.CreatedAt) >= idempotency.Retention:
			// Not this request's: a batch whose failure the client was
			// told (503), or one of an earlier use of the key.
			continue
		default:
			return b, true, nil
		}
	}
	return evs.Batch{}, false, evs.Errorf(evs.CodeUnavailable, "The request could not be created under this Idempotency-Key; retry with a new key.")
}

// storeBatch stores the batch of a read list with its items and queues
// it, or marks it failed. id is the batch's ID ("" for a new one).
func (h *Handler) storeBatch(ctx context.Context, p evs.Principal, in parsedBatch, id string) (evs.Batch, error) {
	now := h.d.Now().UTC()
	items := in.list.items
	// What decided duplicates (as large as the items) is not held while
	// they are stored, which for a million addresses takes seconds.
	in.list.seqs = nil
	if in.list.rows != nil {
		in.list.rows.lines = nil
	}
	if id == "" {
		id = uuid.NewString()
		if h.d.NewID != nil {
			id = h.d.NewID()
		}
	}
	b := evs.Batch{
		ID:          id,
		AccountID:   p.AccountID,
		Mode:        in.mode,
		State:       evs.StateQueued,
		CreatedAt:   now,
		ExpiresAt:   now.Add(h.d.Retention),
		CallbackURL: in.callbackURL,
		MaxAge:      in.maxAge,
		Name:        in.name,
		Counters: evs.Counters{
			Total:      in.list.total,
			Duplicates: in.list.total - len(items),
		},
	}
	// The quota counts what will be verified: the distinct addresses.
	refund, err := h.chargeQuota(ctx, p, len(items))
	if err != nil {
		return evs.Batch{}, err
	}
	// Looked up once the batch is allowed: a refused one costs no DNS.
	if in.mode == evs.ModeFull && !p.Test && h.d.Budgets != nil {
		b.Lanes = h.lanes(ctx, items)
	}
	// The storage quota counts the items, with their results to come.
	held := NewHold(h.d.Ledger, p, b.ExpiresAt)
	if err := held.Add(ctx, int64(len(items))*itemBytes); err != nil {
		refund()
		return evs.Batch{}, err
	}
	// The rows go first: a batch that has rows finds them from the start.
	if err := h.putRows(ctx, b, in.list, held); err != nil {
		held.Undo(ctx)
		refund()
		return evs.Batch{}, err
	}
	if err := h.d.Batches.CreateBatchWithin(ctx, b, items, h.d.MaxActiveBatches); err != nil {
		h.dropRows(ctx, b, in.list)
		held.Undo(ctx)
		refund()
		return evs.Batch{}, err
	}
	held.Done(ctx)
	enqueue := h.d.Queue.Enqueue
	if q, ok := h.d.Queue.(ItemsQueue); ok {
		enqueue = func(ctx context.Context, b evs.Batch) error { return q.EnqueueItems(ctx, b, items) }
	}
	if err := enqueue(ctx, b); err != nil {
		refund() // the batch fails unverified
		if _, terr := h.d.Batches.TransitionBatch(ctx, p.AccountID, b.ID, []evs.State{evs.StateQueued}, evs.StateFailed, unqueuedReason, h.d.Now()); terr != nil {
			h.d.Logger.ErrorContext(ctx, "could not mark an unqueued batch failed", slog.String("batchId", b.ID), slog.String("error", terr.Error()))
		}
		return evs.Batch{}, evs.Wrap(err, evs.CodeUnavailable, "The work queue is unavailable; retry.")
	}
	return b, nil
}

// dedupKey is the normalized address, which decides duplicates, and the
// domain that groups work. An invalid address is its own trimmed text in a
// key space of its own, so it never drops a valid one; valid ones compare
// without case (no provider gives ALICE@ and alice@ to two people).
func dedupKey(email string) (key, domain string) {
	key, domain, ok := verify.NormalizedKey(email)
	if !ok {
		return "invalid:" + strings.TrimSpace(email), ""
	}
	return "valid:" + strings.ToLower(key), domain
}

func (h *Handler) parseBatch(req *request) (parsedBatch, error) {
	switch mediaType(req) {
	case "application/json":
		return parseBatchJSON(req)
	case "text/csv":
		_, keep := h.d.Batches.(RowStore)
		return parseBatchCSV(req, keep)
	default:
		return parsedBatch{}, evs.Errorf(evs.CodeInvalidRequest, "Content-Type must be application/json or text/csv.")
	}
}

// readOptions reads a creation's mode, maxAge, callbackUrl and name, from
// a JSON body's fields or a CSV body's query.
func (out *parsedBatch) readOptions(fields map[string]string, maxAge string, hasMaxAge bool) (err error) {
	modeText, hasMode := fields["mode"]
	var ok bool
	if out.mode, ok = evs.ParseMode(modeText); !ok || hasMode && modeText == "" { // one given must not be empty
		return evs.Errorf(evs.CodeInvalidRequest, "The mode must be \"full\" or \"quick\".")
	}
	if hasMaxAge {
		if out.maxAge, err = parseMaxAge(json.RawMessage(maxAge)); err != nil || maxAge == "" {
			return errMaxAge
		}
	}
	if u, ok := fields["callbackUrl"]; ok {
		if out.callbackURL = u; u == "" {
			return evs.Errorf(evs.CodeInvalidRequest, "The callbackUrl is empty.")
		}
	}
	if n, ok := fields["name"]; ok {
		if err := checkName(n); err != nil {
			return err
		}
		out.name = n
	}
	return nil
}

func parseBatchJSON(req *request) (parsedBatch, error) {
	for _, q := range []string{"mode", "callbackUrl", "maxAge", "name", "column", "delimiter"} {
		if _, ok := req.query[q]; ok {
			return parsedBatch{}, evs.Errorf(evs.CodeInvalidRequest, "With a JSON body the %s goes in the body, not the query.", q)
		}
	}
	out := parsedBatch{list: &addressList{}}
	obj, err := ReadListJSON(bytes.NewReader(req.body), bodyLimits,
		ListFields{Strings: []string{"mode", "callbackUrl", "uploadId", "name", "column", "delimiter"}, Numbers: []string{"maxAge"}}, out.list.add)
	if err != nil {
		return parsedBatch{}, listErr(err)
	}
	maxAge, hasMaxAge := obj.Numbers["maxAge"]
	if err := out.readOptions(obj.Strings, string(maxAge), hasMaxAge); err != nil {
		return parsedBatch{}, err
	}
	if id, ok := obj.Strings["uploadId"]; ok {
		if obj.HasEmails {
			return parsedBatch{}, evs.Errorf(evs.CodeInvalidRequest, "Give either \"emails\" or \"uploadId\", not both.")
		}
		if out.uploadID, err = canonicalUUID(id, "uploadId"); err != nil {
			return parsedBatch{}, err
		}
		if out.layout, err = parseLayout(obj.Strings); err != nil {
			return parsedBatch{}, err
		}
		return out, nil
	}
	for _, f := range []string{"column", "delimiter"} {
		if _, ok := obj.Strings[f]; ok {
			return parsedBatch{}, evs.Errorf(evs.CodeInvalidRequest, "The %s is for a CSV list (a text/csv body or upload), not \"emails\".", f)
		}
	}
	if !obj.HasEmails {
		return parsedBatch{}, evs.Errorf(evs.CodeInvalidRequest, "Field \"emails\" is required (or \"uploadId\", for a list sent with POST /v1/uploads).")
	}
	if err := checkCount(out.list.total); err != nil {
		return parsedBatch{}, err
	}
	return out, nil
}

var bodyLimits = ListLimits{MaxAddresses: MaxBatchAddresses, MaxAddressBytes: MaxEmailLength}

// listErr turns a problem of a list into the client's error: a list over
// its limit names the way to send a larger one.
func listErr(err error) error {
	var e *listError
	switch {
	case isTooMany(err):
		return evs.Errorf(evs.CodeInvalidRequest, "A batch holds at most %d addresses; send larger lists with POST /v1/uploads.", MaxBatchAddresses)
	case errors.As(err, &e):
		return evs.Errorf(evs.CodeInvalidRequest, "%s", e.Error())
	}
	return err
}

func checkCount(n int) error {
	switch {
	case n == 0:
		return evs.Errorf(evs.CodeInvalidRequest, "The list of addresses is empty.")
	case n > MaxBatchAddresses:
		return evs.Errorf(evs.CodeInvalidRequest, "A batch holds at most %d addresses; this one has %d.", MaxBatchAddresses, n)
	}
	return nil
}

// checkEmail refuses what cannot be an address however it is verified; U+FFFD
// too, which encoding/json writes for an unpaired surrogate escape.
func checkEmail(s string, i int) error {
	switch {
	case strings.TrimSpace(s) == "":
		return evs.Errorf(evs.CodeInvalidRequest, "Address %d is empty.", i+1)
	case len(s) > MaxEmailLength:
		return evs.Errorf(evs.CodeInvalidRequest, "Address %d is longer than %d bytes.", i+1, MaxEmailLength)
	case !utf8.ValidString(s):
		return evs.Errorf(evs.CodeInvalidRequest, "Address %d is not valid UTF-8.", i+1)
	case strings.ContainsRune(s, 0):
		return evs.Errorf(evs.CodeInvalidRequest, "Address %d holds a NUL character.", i+1)
	case strings.ContainsRune(s, utf8.RuneError):
		return evs.Errorf(evs.CodeInvalidRequest, "Address %d holds U+FFFD (a replacement character, or an unpaired surrogate escape such as \\ud800).", i+1)
	}
	return nil
}

// parseBatchCSV reads the address column of every row (ReadListCSV); with
// keep, the rows are kept for the results (rows.go).
func parseBatchCSV(req *request, keep bool) (parsedBatch, error) {
	out := parsedBatch{list: &addressList{}}
	maxAge, hasMaxAge := req.query["maxAge"]
	err := out.readOptions(req.query, maxAge, hasMaxAge)
	if err != nil {
		return parsedBatch{}, err
	}
	if out.layout, err = parseLayout(req.query); err != nil {
		return parsedBatch{}, err
	}
	sp, read, err := readRows(bytes.NewReader(req.body), bodyLimits, out.layout, out.list, keep)
	if err != nil {
		return parsedBatch{}, listErr(err)
	}
	out.list.rows, out.list.shape = sp, read
	if err := checkCount(out.list.total); err != nil {
		sp.close()
		return parsedBatch{}, err
	}
	return out, nil
}

func (h *Handler) getBatch(ctx context.Context, req *request, p evs.Principal) (idempotency.Reply, error) {
	id, err := canonicalUUID(req.r.PathValue("id"), "request id")
	if err != nil {
		return idempotency.Reply{}, err
	}
	if v, ok := h.d.Batches.(batchViewer); ok && h.d.Deliveries != nil {
		b, d, found, err := v.BatchView(ctx, p.AccountID, id)
		if err != nil {
			return idempotency.Reply{}, err
		}
		e := h.withETA(envelopeOf(b, false), b)
		if found {
			e = withDelivery(e, d)
		}
		return jsonReply(http.StatusOK, e), nil
	}
	b, err := h.d.Batches.Batch(ctx, p.AccountID, id)
	if err != nil {
		return idempotency.Reply{}, err
	}
	return jsonReply(http.StatusOK, h.withCallback(ctx, p.AccountID, h.withETA(envelopeOf(b, false), b))), nil
}

// batchViewer is a batch store that reads a batch and its delivery in one
// go (the SQLite store): GET then costs one read instead of two.
type batchViewer interface {
	BatchView(ctx context.Context, accountID, id string) (b evs.Batch, d evs.Delivery, found bool, err error)
}

func (h *Handler) cancel(ctx context.Context, req *request, p evs.Principal) (idempotency.Reply, error) {
	id, err := canonicalUUID(req.r.PathValue("id"), "request id")
	if err != nil {
		return idempotency.Reply{}, err
	}
	if strings.TrimSpace(string(req.body)) != "" {
		return idempotency.Reply{}, evs.Errorf(evs.CodeInvalidRequest, "Cancel takes no request body.")
	}
	resp, _, err := h.idempotent(ctx, req, p, func(ctx context.Context) idempotency.Reply {
		b, err := h.d.Batches.TransitionBatch(ctx, p.AccountID, id, []evs.State{evs.StateQueued, evs.StateRunning}, evs.StateCancelled, "", h.d.Now())
		if err != nil {
			if evs.ErrorCode(err) == evs.CodeInvalidState {
				msg := "The batch is already final and cannot be cancelled."
				if b.State != "" {
					msg = "The batch is already " + string(b.State) + " and cannot be cancelled."
				}
				err = evs.Wrap(err, evs.CodeInvalidState, msg)
			}
			return errReply(err)
		}
		if h.d.Finalized != nil {
			h.d.Finalized(ctx, b)
		}
		return jsonReply(http.StatusOK, h.withCallback(ctx, p.AccountID, envelopeOf(b, false)))
	})
	return resp, err
}

// resultItem is one row of GET /v1/requests/{id}/results.
type resultItem struct {
	Email    string       `json:"email"`
	Status   evs.Status   `json:"status"`
	Decision evs.Decision `json:"decision"`
}

type resultsPage struct {
	Results    []resultItem `json:"results"`
	NextCursor *string      `json:"nextCursor"`
}

// cursor is the opaque position of a results page: the last seq looked at,
// and the filters it is valid for.
type cursor struct {
	After    int    `json:"a"`
	Status   string `json:"s,omitempty"`
	Reason   string `json:"r,omitempty"`
	MinScore int    `json:"m,omitempty"`
}

// encodeCursor is the API's one cursor codec: the cursor's JSON,
// base64url without padding.
func encodeCursor(c any) string {
	b, _ := json.Marshal(c) // our own cursor types: cannot fail
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeToken reads a cursor written by encodeCursor into c; fields it
// does not know (another endpoint's cursor) make it invalid.
func decodeToken(s string, c any) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(c) == nil && !dec.More()
}

func errBadCursor() error {
	return evs.Errorf(evs.CodeInvalidRequest, "The cursor is not valid for this request.")
}

func decodeCursor(s string, f filter) (cursor, error) {
	var c cursor
	if !decodeToken(s, &c) || c.After < -1 || c.Status != f.status || c.Reason != f.reason || c.MinScore != f.minScore {
		return cursor{}, errBadCursor()
	}
	return c, nil
}

var statuses = map[string]bool{
	string(evs.Deliverable): true, string(evs.Undeliverable): true,
	string(evs.Risky): true, string(evs.Unknown): true,
}

// filter is what a results request keeps: statuses and reasons (in
// canonical order for the cursor) and the least score. The store filters
// on one status; this layer on the rest.
type filter struct {
	status, reason string
	statuses       map[evs.Status]bool
	reasons        map[evs.Reason]bool
	minScore       int
	layout         string // layoutRows, layoutResults or "" (rows where the batch has them)
}

// The layouts of a results CSV: the user's rows with verdicts appended
// (a batch made from a CSV list), or one row per distinct address.
const (
	layoutRows    = "rows"
	layoutResults = "results"
)

func (f filter) storeStatus() evs.Status {
	if len(f.statuses) == 1 {
		return evs.Status(f.status)
	}
	return ""
}

// sparse tells whether the filter is one the store does not apply, so a
// page should read whole pages' worth.
func (f filter) sparse() bool {
	return f.minScore > 0 || len(f.statuses) > 1 || len(f.reasons) > 0
}

func (f filter) keeps(d evs.Decision) bool {
	switch {
	case len(f.statuses) > 1 && !f.statuses[d.Status()]:
		return false
	case len(f.reasons) > 0 && !f.reasons[d.Reason]:
		return false
	}
	return f.minScore == 0 || verify.Score(d) >= f.minScore
}

func parseFilter(q map[string]string) (filter, error) {
	var (
		f   filter
		err error
	)
	if s, ok := q["status"]; ok {
		f.statuses, f.status, err = labelSet(s, func(v evs.Status) bool { return statuses[string(v)] },
			"The status filter must be deliverable, undeliverable, risky or unknown, or a comma-separated list of them.")
		if err != nil {
			return f, err
		}
	}
	if s, ok := q["reason"]; ok {
		f.reasons, f.reason, err = labelSet(s, evs.Reason.Valid,
			"The reason filter must be reason codes of the contract (accepted_email, rejected_email, ...), comma-separated.")
		if err != nil {
			return f, err
		}
	}
	if s, ok := q["layout"]; ok {
		if s != layoutRows && s != layoutResults {
			return f, evs.Errorf(evs.CodeInvalidRequest, "The layout must be rows (a CSV list's own rows, verdicts appended) or results (one row per distinct address).")
		}
		f.layout = s
	}
	if s, ok := q["minScore"]; ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 100 || strings.TrimLeft(s, "0123456789") != "" {
			return f, evs.Errorf(evs.CodeInvalidRequest, "minScore must be a whole number from 0 to 100.")
		}
		f.minScore = n
	}
	return f, nil
}

// labelSet reads a comma-separated list of labels that valid accepts
// (else msg) into a set, and its canonical, sorted form.
func labelSet[T ~string](s string, valid func(T) bool, msg string) (map[T]bool, string, error) {
	set := map[T]bool{}
	labels := strings.Split(s, ",")
	for _, v := range labels {
		if !valid(T(v)) {
			return nil, "", evs.Errorf(evs.CodeInvalidRequest, "%s", msg)
		}
		set[T(v)] = true
	}
	slices.Sort(labels)
	return set, strings.Join(slices.Compact(labels), ","), nil
}

func parseLimit(q map[string]string) (int, error) {
	s, ok := q["limit"]
	if !ok {
		return DefaultPageLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxPageLimit {
		return 0, evs.Errorf(evs.CodeInvalidRequest, "The limit must be a whole number from 1 to %d.", MaxPageLimit)
	}
	return n, nil
}

// filteredBatch reads the batch of a results route and its filters,
// refusing a query parameter other than the filters and more.
func (h *Handler) filteredBatch(ctx context.Context, req *request, p evs.Principal, more ...string) (evs.Batch, filter, error) {
	id, err := canonicalUUID(req.r.PathValue("id"), "request id")
	if err != nil {
		return evs.Batch{}, filter{}, err
	}
	q := req.query
	f, err := parseFilter(q)
	if err != nil {
		return evs.Batch{}, filter{}, err
	}
	for k := range q {
		if k != "status" && k != "reason" && k != "minScore" && k != "layout" && !slices.Contains(more, k) {
			return evs.Batch{}, filter{}, evs.Errorf(evs.CodeInvalidRequest, "Unknown query parameter %q.", k)
		}
	}
	b, err := h.d.Batches.Batch(ctx, p.AccountID, id)
	return b, f, err
}

func (h *Handler) results(ctx context.Context, req *request, p evs.Principal) (idempotency.Reply, error) {
	b, f, err := h.filteredBatch(ctx, req, p, "limit", "cursor")
	if err != nil {
		return idempotency.Reply{}, err
	}
	q := req.query
	if accept, _ := req.header("Accept"); wantsCSV(accept) {
		return h.resultsCSV(ctx, p, b, f)
	}
	if f.layout != "" {
		return idempotency.Reply{}, evs.Errorf(evs.CodeInvalidRequest, "The layout is for CSV results (Accept: text/csv).")
	}
	limit, err := parseLimit(q)
	if err != nil {
		return idempotency.Reply{}, err
	}
	c := cursor{After: -1, Status: f.status, Reason: f.reason, MinScore: f.minScore}
	if s, ok := q["cursor"]; ok {
		if c, err = decodeCursor(s, f); err != nil {
			return idempotency.Reply{}, err
		}
	}
	page, next, err := h.page(ctx, b, c, f, limit)
	if err != nil {
		return idempotency.Reply{}, err
	}
	out := resultsPage{Results: page}
	if next != nil {
		s := encodeCursor(*next)
		out.NextCursor = &s
	}
	return jsonReply(http.StatusOK, out), nil
}

// page returns the next results after c. Results are written out of order; a
// page stops before the first address without one, so its cursor never skips
// or repeats one, and is null only when nothing more can come. Results the
// filter drops move it too; one call reads at most pageScan results.
func (h *Handler) page(ctx context.Context, b evs.Batch, c cursor, f filter, limit int) ([]resultItem, *cursor, error) {
	page := make([]resultItem, 0, limit)
	next := c
	fetch := limit
	if f.sparse() {
		fetch = MaxPageLimit
	}
	for scanned := 0; ; {
		rs, err := h.d.Batches.Results(ctx, b.AccountID, b.ID, next.After, fetch, f.storeStatus())
		if err != nil {
			return nil, nil, err
		}
		// The first unwritten seq among those the results read span (or
		// after them, when they are the last), -1 when none can appear.
		gap := -1
		if !b.State.Final() {
			upTo := math.MaxInt
			if len(rs) == fetch {
				upTo = rs[len(rs)-1].Seq
			}
			if gap, err = h.d.Batches.FirstPending(ctx, b.AccountID, b.ID, next.After, upTo); err != nil {
				return nil, nil, err
			}
		}
		for _, r := range rs {
			if gap >= 0 && r.Seq >= gap { // come back from the gap
				next.After = gap - 1
				return page, &next, nil
			}
			next.After = r.Seq
			if !f.keeps(r.Decision) {
				continue
			}
			page = append(page, resultItem{Email: r.Email, Status: r.Status(), Decision: Rendered(r.Decision)})
			if len(page) == limit {
				return page, &next, nil
			}
		}
		scanned += len(rs)
		switch {
		case len(rs) < fetch && gap >= 0:
			next.After = gap - 1
			return page, &next, nil
		case len(rs) < fetch:
			return page, nil, nil
		case scanned >= pageScan:
			return page, &next, nil
		}
	}
}

const pageScan = 5 * MaxPageLimit

func wantsCSV(accept string) bool {
	return slices.ContainsFunc(strings.Split(accept, ","), func(part string) bool {
		mt, _, _ := strings.Cut(part, ";")
		return strings.EqualFold(strings.TrimSpace(mt), "text/csv")
	})
}

// csvHeader is the contract's CSV header row.
var csvHeader = []string{"email", "status", "reason", "suggestion", "disposable", "role", "free", "acceptAll", "provider", "score"}

// resultsCSV answers with every written result, in submission order. On
// AWS a list longer than MaxCSVReply is an export job (exportJob); `evs
// serve` streams the list a page at a time.
func (h *Handler) resultsCSV(ctx context.Context, p evs.Principal, b evs.Batch, f filter) (idempotency.Reply, error) {
	rows := newCSVRows(h.d.Batches, p.AccountID, b.ID, f)
	streaming := false
	defer func() {
		if !streaming {
			rows.close()
		}
	}()
	if h.d.ExportJobs != nil {
		return h.exportJob(ctx, p, b, f, seeOther, func() (idempotency.Reply, bool, error) {
			var buf bytes.Buffer
			full, err := rows.writeUpTo(ctx, &buf, h.d.MaxCSVReply)
			return csvReply(buf.Bytes()), !full, err
		})
	}
	// A first part is read before the status is sent, so that a store
	// fault is still an error reply; the rest is then streamed.
	var buf bytes.Buffer
	full, err := rows.writeUpTo(ctx, &buf, csvFirstPart)
	if err != nil {
		return idempotency.Reply{}, err
	}
	r := csvReply(buf.Bytes())
	if full {
		streaming = true
		r.Stream = func(w io.Writer) error {
			defer rows.close()
			_, err := rows.writeUpTo(ctx, w, -1)
			return err
		}
	}
	return r, nil
}

func csvReply(body []byte) idempotency.Reply {
	return idempotency.Reply{StatusCode: http.StatusOK, Headers: map[string]string{"Content-Type": "text/csv; charset=utf-8"}, Body: body}
}

func seeOther(j store.ExportJob) idempotency.Reply {
	r := jsonReply(http.StatusSeeOther, exportReply{URL: j.URL, ExpiresAt: evs.Time{Time: j.ExpiresAt}})
	r.Headers = map[string]string{"Location": j.URL}
	return r
}

const csvFirstPart = 64 << 10

// csvRows writes the results a filter keeps as the contract's CSV, in
// submission order, a page at a time; a batch with rows (RowStore) as the
// user's rows with the verdicts appended (rows.go), unless layout=results.
type csvRows struct {
	batches         ResultReader
	account, batch  string
	f               filter
	after           int
	header, drained bool
	opened          bool      // the batch's rows were looked for
	join            *rowsJoin // reads them, when it has some
	row             []string  // reused
}

func newCSVRows(b ResultReader, account, batch string, f filter) *csvRows {
	return &csvRows{batches: b, account: account, batch: batch, f: f, after: -1}
}

func (c *csvRows) close() { c.join.close() }

// writeUpTo writes rows to w until all are written or, with limit >= 0,
// until w (a *bytes.Buffer) holds more than limit bytes after a page:
// full tells which. A later call goes on from there.
func (c *csvRows) writeUpTo(ctx context.Context, w io.Writer, limit int) (full bool, err error) {
	if !c.opened {
		c.opened = true
		if rs, ok := c.batches.(RowStore); ok && c.f.layout != layoutResults {
			if c.join, err = openRowsJoin(ctx, rs, c.account, c.batch); err != nil {
				return false, err
			}
		}
	}
	if c.join != nil {
		return c.writeRowsUpTo(ctx, w, limit)
	}
	cw := csv.NewWriter(w)
	if !c.header {
		c.header = true
		_ = cw.Write(csvHeader)
	}
	for !c.drained {
		rs, err := c.batches.Results(ctx, c.account, c.batch, c.after, MaxPageLimit, c.f.storeStatus())
		if err != nil {
			return false, err
		}
		for _, r := range rs {
			c.after = r.Seq
			d := r.Decision
			if !c.f.keeps(d) {
				continue
			}
			c.row = appendVerdict(append(c.row[:0], csvSafe(r.Email)), d)
			_ = cw.Write(c.row)
		}
		c.drained = len(rs) < MaxPageLimit
		if full, err := flushed(cw, w, limit); err != nil || full && !c.drained {
			return full, err
		}
	}
	return flushed(cw, w, limit)
}

// flushed flushes cw and tells whether w, a reply's buffer filled up to
// limit >= 0, holds more.
func flushed(cw *csv.Writer, w io.Writer, limit int) (full bool, err error) {
	cw.Flush()
	if err := cw.Error(); err != nil {
		return false, err
	}
	b, ok := w.(*bytes.Buffer)
	return ok && limit >= 0 && b.Len() > limit, nil
}

// writeRowsUpTo is writeUpTo for a batch with rows: the user's rows in
// their order, each with its verdict, flushed every rowsFlush rows.
func (c *csvRows) writeRowsUpTo(ctx context.Context, w io.Writer, limit int) (bool, error) {
	j := c.join
	cw := j.newWriter(w)
	// header writes the first row once: the user's header, else blank
	// names, before the first data row or in a file without one.
	header := func(fields []string) error {
		if c.header {
			return nil
		}
		c.header = true
		if err := j.begin(w); err != nil {
			return err
		}
		return cw.Write(j.headerRow(fields))
	}
	filtered := c.f.statuses != nil || c.f.sparse()
	for n := 1; !c.drained; n++ {
		fields, seq, line, dupOf, isHeader, err := j.next()
		switch {
		case err == io.EOF:
			c.drained = true
		case err != nil:
			return false, err
		case isHeader:
			if err := header(fields); err != nil {
				return false, err
			}
		default:
			if err := header(nil); err != nil {
				return false, err
			}
			var r *evs.Result
			if seq >= 0 {
				res, ok, err := j.result(ctx, c.batches, c.account, c.batch, seq, dupOf != "")
				if err != nil {
					return false, err
				}
				if ok {
					r = &res
				}
			}
			if filtered && (r == nil || !c.f.statuses[r.Status()] && c.f.statuses != nil || !c.f.keeps(r.Decision)) {
				continue
			}
			_ = cw.Write(j.dataRow(fields, r, line, dupOf))
		}
		if n%rowsFlush != 0 && !c.drained {
			continue
		}
		if full, err := flushed(cw, w, limit); err != nil || full {
			return full, err
		}
	}
	if c.header {
		return false, nil
	}
	if err := header(nil); err != nil {
		return false, err
	}
	cw.Flush()
	return false, cw.Error()
}

const rowsFlush = MaxPageLimit

// export serves GET /v1/requests/{id}/export: the CSV Accept: text/csv gives,
// stored for a URL that needs no key until it expires; a job on AWS
// (ExportJobs), written in the call by `evs serve` (ExportLinks).
func (h *Handler) export(ctx context.Context, req *request, p evs.Principal) (idempotency.Reply, error) {
	if h.d.ExportLinks == nil && h.d.ExportJobs == nil {
		return idempotency.Reply{}, evs.Errorf(evs.CodeNotFound, "No such route.")
	}
	b, f, err := h.filteredBatch(ctx, req, p)
	if err != nil {
		return idempotency.Reply{}, err
	}
	if h.d.ExportJobs != nil {
		return h.exportJob(ctx, p, b, f, func(j store.ExportJob) idempotency.Reply {
			return jsonReply(http.StatusOK, exportReply{URL: j.URL, ExpiresAt: evs.Time{Time: j.ExpiresAt}})
		}, nil)
	}
	rows := newCSVRows(h.d.Batches, p.AccountID, b.ID, f)
	defer rows.close()
	held := NewHold(h.d.Ledger, p, h.d.Now().Add(evs.ExportTTL))
	url, expires, err := h.d.ExportLinks.Export(ctx, p.AccountID, b.ID, f.query(), batchVersion(b), h.origin(req), func(w io.Writer) error {
		_, err := rows.writeUpTo(ctx, held.Writer(ctx, w), -1)
		return err
	})
	if err != nil {
		held.Undo(ctx)
		return idempotency.Reply{}, err
	}
	held.Done(ctx)
	return jsonReply(http.StatusOK, exportReply{URL: url, ExpiresAt: evs.Time{Time: expires}}), nil
}

// origin is the API's origin as the client reaches it, for URLs that
// `evs serve` itself answers: EVS_PUBLIC_URL, else the call's own.
func (h *Handler) origin(req *request) string {
	if h.d.PublicURL != "" {
		return h.d.PublicURL
	}
	host, _ := req.header("Host")
	scheme := "http"
	if proto, _ := req.header("X-Forwarded-Proto"); strings.EqualFold(proto, "https") {
		scheme = "https"
	}
	return scheme + "://" + host
}

// Exports stores a CSV result list as write writes it and returns a URL
// it can be downloaded from without a key until expires (`evs serve`'s
// /v1/exports/{id}?token=..., under origin). The list of a batch under the
// same filters and version is reused while it lives, without calling
// write. An error write returns is returned as it is, nothing kept.
type Exports interface {
	Export(ctx context.Context, accountID, batchID, filters, version, origin string, write func(w io.Writer) error) (url string, expires time.Time, err error)
}

type exportReply struct {
	URL       string   `json:"url"`
	ExpiresAt evs.Time `json:"expiresAt"`
}

func csvMaybe(v, unknown bool) string {
	if unknown {
		return ""
	}
	return strconv.FormatBool(v)
}

// csvSafe keeps a spreadsheet from reading a cell as a formula (CSV
// injection), also after leading blanks (" =1+1"). A sign before a number
// (a phone number "+1 555 0100", an amount "-5") is a value and stays.
func csvSafe(s string) string {
	t := strings.TrimLeftFunc(s, unicode.IsSpace)
	switch {
	case s != "" && strings.ContainsRune("\t\r\n", rune(s[0])):
	case t == "" || !strings.ContainsRune("=+-@", rune(t[0])):
		return s
	case (t[0] == '+' || t[0] == '-') && numberLike(t[1:]):
		return s
	}
	return "'" + s
}

// numberLike tells whether s, after a sign, is a number as people write
// one: a digit at least, and only " .,()-/" else.
func numberLike(s string) bool {
	digit := false
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			digit = true
		case !strings.ContainsRune(" .,()-/", r):
			return false
		}
	}
	return digit
}
