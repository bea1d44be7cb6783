package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
)

// UploadTTL is how long an upload's URL and ID work: time to send 100 MiB
// on a slow line, short enough that a leaked URL soon stops working.
const UploadTTL = time.Hour

// MaxOpenUploads is how many open uploads an account may have at once:
// without a cap one account could fill the disk with unused uploads.
const MaxOpenUploads = 10

// Uploads keeps lists sent to a URL of their own: S3 with pre-signed URLs
// on AWS, the embedded store behind `evs serve`'s own URL.
type Uploads interface {
	// CreateUpload records u and returns the URL the client PUTs the list
	// to, valid until u.ExpiresAt (origin: the API's own, for a store
	// whose URL is the server's). With maxOpen (> 0) open uploads already
	// it records nothing and returns store.OpenUploadsLimit, atomically.
	CreateUpload(ctx context.Context, u evs.Upload, origin string, maxOpen int) (url string, err error)
	// OpenUpload returns the upload id of account and its content, of
	// size bytes, for the caller to close: CodeNotFound when unknown,
	// expired or another account's, CodeInvalidState when still empty.
	OpenUpload(ctx context.Context, accountID, id string) (u evs.Upload, content io.ReadCloser, size int64, err error)
	// DropUpload deletes the upload's content once a batch holds it.
	DropUpload(ctx context.Context, accountID, id string) error
}

// uploadNamespace derives a batch's ID from its upload's: an upload makes
// at most one batch, which the store's unique batch ID enforces.
var uploadNamespace = uuid.MustParse("6f1c2a54-3d5e-4b8a-9c1e-7e0b5a3f2d19")

// UploadBatchID is the ID of the batch created from upload id.
func UploadBatchID(uploadID string) string {
	return uuid.NewSHA1(uploadNamespace, []byte(uploadID)).String()
}

type uploadRequest struct {
	ContentType *string `json:"contentType"`
}

type uploadReply struct {
	UploadID  string   `json:"uploadId"`
	URL       string   `json:"url"`
	Method    string   `json:"method"`
	ExpiresAt evs.Time `json:"expiresAt"`
	MaxBytes  int64    `json:"maxBytes"`
}

func (h *Handler) createUpload(ctx context.Context, req *request, p evs.Principal) (idempotency.Reply, error) {
	if h.d.Uploads == nil {
		return idempotency.Reply{}, evs.Errorf(evs.CodeNotFound, "No such route.")
	}
	var in uploadRequest
	if err := decodeJSON(req, &in); err != nil {
		return idempotency.Reply{}, err
	}
	if in.ContentType == nil {
		return idempotency.Reply{}, evs.Errorf(evs.CodeInvalidRequest, "Field \"contentType\" is required: \"text/csv\" or \"application/json\".")
	}
	ct := *in.ContentType
	if ct != "text/csv" && ct != "application/json" {
		return idempotency.Reply{}, evs.Errorf(evs.CodeInvalidRequest, "Field \"contentType\" must be \"text/csv\" or \"application/json\".")
	}
	origin := h.origin(req)
	resp, _, err := h.idempotent(ctx, req, p, func(ctx context.Context) idempotency.Reply {
		now := h.d.Now().UTC()
		u := evs.Upload{
			ID: uuid.NewString(), AccountID: p.AccountID, ContentType: ct,
			CreatedAt: now, ExpiresAt: now.Add(UploadTTL), MaxBytes: evs.UploadMaxBytes,
		}
		url, err := h.d.Uploads.CreateUpload(ctx, u, origin, MaxOpenUploads)
		if err != nil {
			return errReply(err)
		}
		return jsonReply(http.StatusCreated, uploadReply{
			UploadID: u.ID, URL: url, Method: http.MethodPut, ExpiresAt: evs.Time{Time: u.ExpiresAt}, MaxBytes: u.MaxBytes,
		})
	})
	return resp, err
}

// storeUploadBatch creates the batch of an upload, its list read as a
// stream. A list over the limits makes a batch `failed` with the reason;
// one that is not valid CSV or JSON is a 400.
func (h *Handler) storeUploadBatch(ctx context.Context, p evs.Principal, in parsedBatch) (evs.Batch, error) {
	if h.d.Uploads == nil {
		return evs.Batch{}, evs.Errorf(evs.CodeNotFound, "No such upload.")
	}
	id := UploadBatchID(in.uploadID)
	if _, err := h.d.Batches.Batch(ctx, p.AccountID, id); err == nil {
		return evs.Batch{}, usedUpload(id)
	} else if evs.ErrorCode(err) != evs.CodeNotFound {
		return evs.Batch{}, err
	}
	u, content, size, err := h.d.Uploads.OpenUpload(ctx, p.AccountID, in.uploadID)
	if err != nil {
		return evs.Batch{}, err
	}
	defer content.Close()
	in.upload, in.uploadSize = u, size
	if size > u.MaxBytes {
		return h.failedUploadBatch(ctx, p, in, id, "The upload is larger than "+formatBytes(u.MaxBytes)+".")
	}
	if h.d.AdmitList != nil {
		release, err := h.d.AdmitList(ctx, size)
		if err != nil {
			return evs.Batch{}, err
		}
		defer release()
	}
	_, keep := h.d.Batches.(RowStore)
	read := func(r io.Reader, lim ListLimits, add func(string) error) error {
		sp, shape, err := readRows(r, lim, in.layout, in.list, keep)
		in.list.rows, in.list.shape = sp, shape
		return err
	}
	if u.ContentType == "application/json" {
		if in.layout != (CSVLayout{}) {
			return evs.Batch{}, evs.Errorf(evs.CodeInvalidRequest, "The column and delimiter are for a CSV list; this upload is JSON.")
		}
		read = func(r io.Reader, lim ListLimits, add func(string) error) error {
			_, err := ReadListJSON(r, lim, ListFields{}, add)
			return err
		}
	}
	// The stream may be longer than announced (a store that cannot tell);
	// one byte past the limit is enough to know.
	lr := &io.LimitedReader{R: content, N: u.MaxBytes + 1}
	err = read(lr, ListLimits{MaxAddresses: h.d.MaxUploadAddresses, MaxAddressBytes: MaxEmailLength}, in.list.add)
	defer in.list.rows.close()
	var bad *listError
	var refused *evs.Error
	switch {
	case lr.N == 0:
		return h.failedUploadBatch(ctx, p, in, id, "The upload is larger than "+formatBytes(u.MaxBytes)+".")
	case isTooMany(err):
		return h.failedUploadBatch(ctx, p, in, id, "The upload holds more than "+strconv.Itoa(h.d.MaxUploadAddresses)+" addresses; split the list.")
	case errors.As(err, &bad):
		return evs.Batch{}, evs.Errorf(evs.CodeInvalidRequest, "The upload is not a valid list: %s", bad.Error())
	case errors.As(err, &refused):
		return evs.Batch{}, err // an address the contract refuses
	case err != nil:
		return evs.Batch{}, evs.Wrap(err, evs.CodeUnavailable, "The upload could not be read; retry.")
	case in.list.total == 0:
		return evs.Batch{}, evs.Errorf(evs.CodeInvalidRequest, "The upload holds no addresses.")
	}
	b, err := h.storeBatch(ctx, p, in, id)
	if evs.ErrorCode(err) == evs.CodeInvalidState {
		return evs.Batch{}, usedUpload(id) // a creation from the same upload won
	}
	if err != nil {
		return evs.Batch{}, err
	}
	h.dropUpload(ctx, p, in, id)
	return b, nil
}

// dropUpload deletes the content of the upload its batch now holds, and
// gives its charge back (ChargeUploads). A failure is logged: what is
// left expires with the upload.
func (h *Handler) dropUpload(ctx context.Context, p evs.Principal, in parsedBatch, batchID string) {
	if err := h.d.Uploads.DropUpload(ctx, p.AccountID, in.uploadID); err != nil {
		h.d.Logger.WarnContext(ctx, "could not delete an upload's content", slog.String("batchId", batchID), slog.String("error", err.Error()))
		return
	}
	if h.d.ChargeUploads && h.d.Ledger != nil {
		h.d.Ledger.Release(ctx, p.AccountID, KeptBytes, in.uploadSize, in.upload.ExpiresAt)
	}
}

func usedUpload(batchID string) error {
	return evs.Errorf(evs.CodeInvalidState, "The upload was already used: it made request %s.", batchID)
}

// failedUploadBatch stores the batch of an upload over its limits, failed
// with reason, so the client and the callback see why.
func (h *Handler) failedUploadBatch(ctx context.Context, p evs.Principal, in parsedBatch, id, reason string) (evs.Batch, error) {
	now := h.d.Now().UTC()
	b := evs.Batch{
		ID: id, AccountID: p.AccountID, Mode: in.mode, State: evs.StateFailed, Error: reason,
		CreatedAt: now, CompletedAt: now, ExpiresAt: now.Add(h.d.Retention), CallbackURL: in.callbackURL,
	}
	if err := h.d.Batches.CreateBatchWithin(ctx, b, nil, 0); err != nil {
		if evs.ErrorCode(err) == evs.CodeInvalidState {
			return evs.Batch{}, usedUpload(id)
		}
		return evs.Batch{}, err
	}
	h.dropUpload(ctx, p, in, id)
	if h.d.Finalized != nil {
		h.d.Finalized(ctx, b)
	}
	return b, nil
}

func formatBytes(n int64) string {
	if n%(1<<20) == 0 {
		return strconv.Itoa(int(n>>20)) + " MiB (" + strconv.Itoa(int(n)) + " bytes)"
	}
	return strconv.Itoa(int(n)) + " bytes"
}
