package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// exportStore is a store that keeps exported result lists itself: `evs
// serve` then serves the URLs the export route hands out.
type exportStore interface {
	api.Exports
	OpenExport(ctx context.Context, id, token string) (batchID string, f *os.File, err error)
}

// exportRoute is the route template of an export's URL, in logs and
// metrics. It is no API Gateway route: on AWS the URL is S3's.
const exportRoute = "/v1/exports/{id}"

// sendExport answers GET on an export's URL with the list; its token is
// the credential, so a browser fetches it without the API key.
func (g *edge) sendExport(w http.ResponseWriter, r *http.Request) {
	c, id := routed(r, exportRoute), r.PathValue("id")
	client, ok := g.admitTokenCall(w, r, c, http.MethodGet, http.MethodHead)
	if !ok {
		return
	}
	batchID, f, err := g.exports.OpenExport(r.Context(), id, r.URL.Query().Get("token"))
	if err != nil {
		if evs.ErrorCode(err) == evs.CodeNotFound {
			g.fails.fail(client, g.o.Now())
		}
		writeCallError(w, r, c, err)
		return
	}
	defer f.Close()
	c.Attr = slog.String("batchId", batchID)
	fi, err := f.Stat()
	if err != nil {
		writeCallError(w, r, c, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/csv; charset=utf-8")
	h.Set("Content-Disposition", `attachment; filename="`+batchID+`.csv"`)
	h.Set("Cache-Control", "private, no-store")
	http.ServeContent(w, r, "", fi.ModTime(), f)
}

// writeCallError answers a call the edge serves itself (an upload's or an
// export's URL) with err in the error envelope.
func writeCallError(w http.ResponseWriter, r *http.Request, c *api.Call, err error) {
	defer refuseEarly(w, r)()
	status, body := api.FromError(err, c.RequestID)
	if status >= 500 {
		c.Err = err
	}
	if le, ok := errors.AsType[*store.LimitError](err); ok {
		w.Header().Set("Retry-After", api.RetryAfter(le.Retry))
	} else if be, ok := errors.AsType[*api.BusyError](err); ok {
		w.Header().Set("Retry-After", be.RetryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// admitTokenCall admits a call to a URL whose token is its credential: one
// of methods, from a client the failure limiter does not block. It answers
// a call it refuses, and returns the client's limiter key.
func (g *edge) admitTokenCall(w http.ResponseWriter, r *http.Request, c *api.Call, methods ...string) (client string, ok bool) {
	if !slices.Contains(methods, r.Method) {
		w.Header().Set("Allow", strings.Join(methods, ", "))
		writeCallError(w, r, c, evs.Errorf(evs.CodeMethodNotAllowed, "Method %s is not allowed here; use %s.", r.Method, methods[0]))
		return "", false
	}
	client = api.ClientPrefix(c.ClientAddr)
	if wait, blocked := g.fails.blocked(client, g.o.Now()); blocked {
		defer refuseEarly(w, r)()
		writeResponse(w, throttled, c.RequestID, map[string]string{"Retry-After": api.RetryAfter(wait)})
		return "", false
	}
	return client, true
}
