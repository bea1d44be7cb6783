package server

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// The free-space watermark (EVS_MIN_FREE_BYTES). A full disk harms every
// tenant at once: writes of work already accepted fail, and SQLite cannot
// checkpoint. So below the watermark new work that stores much (a batch,
// an upload) is refused before it is read, while everything else, the
// work already accepted included, goes on: polls, results, cancels and
// single verifications write little or nothing. The reply is the
// contract's 503 unavailable, safe to retry, with a Retry-After; /readyz
// answers 503 meanwhile, so that a balancer sends work elsewhere, and the
// gauge evs_disk_below_watermark says why (contract, section 16).

// lowSpaceRetry is the Retry-After of a refusal for lack of space.
const lowSpaceRetry = 60 * time.Second

// storesWork tells whether a call of route with method would store new
// work: a batch, an upload (its PUT is refused the same way, in
// receiveUpload), an export file, outcomes. The runtime's ledger checks
// the watermark again as each of them writes (app.Ports.FreeBytes).
func storesWork(method string, route string) bool {
	return method == http.MethodPost && (route == "/v1/requests" || route == "/v1/outcomes" || strings.HasPrefix(route, "/v1/uploads")) ||
		method == http.MethodGet && route == "/v1/requests/{id}/export"
}

// errLowSpace is the readiness verdict of a server below the watermark.
var errLowSpace = errors.New("low on storage: less free space than EVS_MIN_FREE_BYTES")

// lowOnSpace tells whether the data directory's file system has less free
// space than the watermark. A reading that fails lets the call through:
// the store's own errors still report a full disk.
func (g *edge) lowOnSpace() bool {
	if g.o.Config.MinFreeBytes <= 0 || g.o.FreeBytes == nil {
		return false
	}
	free, err := g.o.FreeBytes()
	return err == nil && free < uint64(g.o.Config.MinFreeBytes)
}

// writeLowSpace answers a call refused for lack of space.
func writeLowSpace(w http.ResponseWriter, requestID string) {
	w.Header().Set("Retry-After", retryAfter(lowSpaceRetry))
	writeError(w, http.StatusServiceUnavailable, evs.CodeUnavailable,
		"The service is low on storage and takes no new batches, uploads, exports or outcomes until space is freed; retry later.", requestID)
}
