package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/idempotency"
	"github.com/evs-dev/evs/internal/verify"
)

// Limits of POST /v1/verify (contract, sections 1 and 2).
const (
	MaxVerifyBody  = 8 << 10
	MaxEmailLength = 512
)

type verifyRequest struct {
	Email  *string         `json:"email"`
	Mode   *string         `json:"mode"`
	MaxAge json.RawMessage `json:"maxAge"`
}

type verifyResponse struct {
	Status   evs.Status   `json:"status"`
	Decision evs.Decision `json:"decision"`
}

// publishableVerifyResponse is the reply to a publishable key: what a
// sign-up form needs, nothing of the checks or the account's history.
type publishableVerifyResponse struct {
	Status     evs.Status `json:"status"`
	Reason     evs.Reason `json:"reason"`
	Score      int        `json:"score"`
	Suggestion *string    `json:"suggestion"`
	Flags      evs.Flags  `json:"flags"`
}

// verifyReply is the one place a reply of /v1/verify is shaped: whole for
// a secret key, trimmed for a publishable one.
func verifyReply(p evs.Principal, d evs.Decision) idempotency.Reply {
	d = Rendered(d)
	if p.Kind == evs.KeyPublishable {
		return jsonReply(http.StatusOK, publishableVerifyResponse{Status: d.Status(), Reason: d.Reason,
			Score: d.Score, Suggestion: d.Suggestion, Flags: d.Flags})
	}
	return jsonReply(http.StatusOK, verifyResponse{Status: d.Status(), Decision: d})
}

// verify serves POST /v1/verify: one address, verified synchronously. The
// call's log line gets the address's domain.
func (h *Handler) verify(ctx context.Context, req *request, p evs.Principal) (idempotency.Reply, error) {
	if err := h.limitPublishable(ctx, p); err != nil {
		return idempotency.Reply{}, err
	}
	reply, domain, err := h.verifyOne(ctx, req, p)
	CallFromContext(ctx).Attr = slog.String("domain", domain)
	return reply, err
}

func (h *Handler) verifyOne(ctx context.Context, req *request, p evs.Principal) (idempotency.Reply, string, error) {
	var in verifyRequest
	if err := decodeJSON(req, &in); err != nil {
		return idempotency.Reply{}, "", err
	}
	if in.Email == nil {
		return idempotency.Reply{}, "", evs.Errorf(evs.CodeInvalidRequest, "Field \"email\" is required.")
	}
	if *in.Email == "" {
		return idempotency.Reply{}, "", evs.Errorf(evs.CodeInvalidRequest, "Field \"email\" must not be empty.")
	}
	if len(*in.Email) > MaxEmailLength {
		return idempotency.Reply{}, "", evs.Errorf(evs.CodeInvalidRequest, "Field \"email\" is longer than %d bytes.", MaxEmailLength)
	}
	if strings.ContainsRune(*in.Email, utf8.RuneError) || strings.ContainsRune(*in.Email, 0) {
		return idempotency.Reply{}, "", evs.Errorf(evs.CodeInvalidRequest, "Field \"email\" holds U+FFFD (a replacement character, or an unpaired surrogate escape) or a NUL character.")
	}
	modeText := str(in.Mode)
	mode, ok := evs.ParseMode(modeText)
	if !ok || in.Mode != nil && modeText == "" { // given, it must not be empty
		return idempotency.Reply{}, "", evs.Errorf(evs.CodeInvalidRequest, "Field \"mode\" must be \"full\" or \"quick\".")
	}
	maxAge, err := parseMaxAge(in.MaxAge)
	if err != nil {
		return idempotency.Reply{}, "", err
	}
	engine := h.d.Engine
	if p.Test {
		engine = h.d.Sandbox
	}
	// The one parse of the address, for the cache, the engine and the log
	// line (which takes its domain even on a replay).
	addr := verify.Inspect(*in.Email)
	resp, _, err := h.idempotent(ctx, req, p, func(ctx context.Context) idempotency.Reply {
		refund, err := h.chargeQuota(ctx, p, 1) // a replay never gets here
		if err != nil {
			return errReply(err)
		}
		vctx := ctx
		if !p.Test { // the sandbox never waits on the network
			var cancel context.CancelFunc
			vctx, cancel = context.WithTimeout(ctx, h.d.VerifyTimeout)
			defer cancel()
		}
		d := h.verifyCached(vctx, engine, p, addr, mode, maxAge)
		d = h.withHistory(ctx, p, d)
		if verify.ExitDown(d.Checks.SMTP) { // no verdict on the address
			refund()
			return errReply(&BusyError{Err: evs.Errorf(evs.CodeUnavailable, "Our SMTP exit could not be reached, so the address was not checked; retry later."),
				RetryAfter: RetryAfterExitDown})
		}
		return verifyReply(p, d)
	})
	return resp, addr.Address.Domain, err
}

// RetryAfterExitDown is the Retry-After, in seconds, of a /v1/verify our
// SMTP exit failed: as long as a batch waits before trying again.
const RetryAfterExitDown = "30"

// verifyCached verifies the inspected address for p, reusing the account's
// cached verdict when one is fresh enough for maxAge, and keeps a new live
// verdict. Test mode neither reads nor writes the cache.
func (h *Handler) verifyCached(ctx context.Context, engine Verifier, p evs.Principal, addr verify.Inspection, mode evs.Mode, maxAge time.Duration) evs.Decision {
	if p.Test || h.d.Cache == nil {
		return engine.Verify(ctx, addr, mode)
	}
	if addr.Valid {
		if d, hit := h.d.Cache.Lookup(ctx, p.AccountID, mode, addr.Normalized, addr.Email, maxAge); hit {
			return d
		}
	}
	d := engine.Verify(ctx, addr, mode)
	if err := h.d.Cache.Keep(ctx, p.AccountID, d); err != nil {
		h.d.Logger.Warn("could not keep a verdict in the result cache", slog.String("accountId", p.AccountID), slog.String("error", err.Error()))
	}
	return d
}

var errMaxAge = evs.Errorf(evs.CodeInvalidRequest, "Field \"maxAge\" must be an integer number of seconds, 0 or more.")

// parseMaxAge reads a request's maxAge, whole seconds, as ResultCache takes
// it: 0 when absent (or null), evs.NoReuse for 0.
func parseMaxAge(raw json.RawMessage) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	n, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return 0, errMaxAge
	}
	if n > uint64(math.MaxInt64/int64(time.Second)) { // older than any verdict can be
		return 0, nil
	}
	if n == 0 {
		return evs.NoReuse, nil
	}
	return time.Duration(n) * time.Second, nil
}
