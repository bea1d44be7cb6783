package server

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
)

// The free-space watermark (EVS_MIN_FREE_BYTES): a full disk harms every
// tenant at once, so below it new work that stores much is refused (503
// with a Retry-After, and /readyz 503) before it is read, while the work
// already accepted goes on.

// lowSpaceRetry is the Retry-After of a refusal for lack of space.
const lowSpaceRetry = 60 * time.Second

// storesWork tells whether a call of route with method would store new
// work (the ledger checks the watermark again as it writes).
func storesWork(method string, route string) bool {
	return method == http.MethodPost && (route == "/v1/requests" || route == "/v1/outcomes" || strings.HasPrefix(route, "/v1/uploads")) ||
		method == http.MethodGet && route == "/v1/requests/{id}/export"
}

// errLowSpace is the readiness verdict of a server below the watermark.
var errLowSpace = errors.New("low on storage: less free space than EVS_MIN_FREE_BYTES")

// lowOnSpace tells whether the data directory's file system has less free
// space than the watermark; a reading that fails lets the call through.
func (g *edge) lowOnSpace() bool {
	if g.o.Config.MinFreeBytes <= 0 || g.o.FreeBytes == nil {
		return false
	}
	free, err := g.o.FreeBytes()
	return err == nil && free < uint64(g.o.Config.MinFreeBytes)
}

// writeLowSpace answers a call refused for lack of space.
func writeLowSpace(w http.ResponseWriter, requestID string) {
	w.Header().Set("Retry-After", api.RetryAfter(lowSpaceRetry))
	writeError(w, http.StatusServiceUnavailable, evs.CodeUnavailable,
		"The service is low on storage and takes no new batches, uploads, exports or outcomes until space is freed; retry later.", requestID)
}
