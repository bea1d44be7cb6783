// The sign-up widget (contract, section 17; docs/widget.md): one script a
// web page includes with a publishable key, served with no key by `evs
// serve` and by the AWS stack's requests function, embedded in the binary
// like the console.

package api

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// WidgetPath is where the widget is served, and its API Gateway resource
// on the AWS stack (template.yaml, on the requests function, with no
// authorizer).
const WidgetPath = "/widget.js"

// The widget's caching. Any page may fetch it unversioned and is told to
// keep it for WidgetMaxAge seconds, then to revalidate (a 304 on its
// ETag): an upgrade reaches every page within that time. A page that pins
// the version (?v=WidgetVersion()) may keep it for WidgetPinnedMaxAge and
// never ask again: that URL never names other content.
const (
	WidgetMaxAge       = 300
	WidgetPinnedMaxAge = 365 * 24 * 3600
)

//go:embed widget/widget.js
var widgetJS []byte

// widgetVersion and widgetGz are the embedded script as served: its
// version, and its bytes gzipped once, as most browsers take it.
var widgetVersion, widgetGz = func() (string, []byte) {
	sum := sha256.Sum256(widgetJS)
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression) // a valid level: no error
	_, _ = zw.Write(widgetJS)                              // to memory: no error
	_ = zw.Close()
	return hex.EncodeToString(sum[:8]), b.Bytes()
}()

// MountWidget serves the widget on mux at WidgetPath to any page: no key,
// GET and HEAD only, cross-origin, and readable by CORS so that a page may
// check it with Subresource Integrity. MountConsole calls it: wherever the
// console is served with no key, so is the widget.
func MountWidget(mux *http.ServeMux) {
	mux.HandleFunc(WidgetPath, func(w http.ResponseWriter, r *http.Request) {
		c := CallFromContext(r.Context())
		c.Route = WidgetPath
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			// In the contract's envelope, as every route of api/openapi.yaml.
			h.Set("Allow", "GET, HEAD")
			WriteError(w, evs.Errorf(evs.CodeMethodNotAllowed, "Method %s is not allowed here; use GET.", r.Method), c.RequestID)
			return
		}
		h.Set("Content-Type", "text/javascript; charset=utf-8")
		h.Set("Cross-Origin-Resource-Policy", "cross-origin")
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Vary", "Accept-Encoding")
		maxAge := strconv.Itoa(WidgetMaxAge)
		if r.URL.Query().Get("v") == widgetVersion {
			maxAge = strconv.Itoa(WidgetPinnedMaxAge) + ", immutable"
		}
		h.Set("Cache-Control", "public, max-age="+maxAge)
		body, tag := widgetJS, `"`+widgetVersion+`"`
		if acceptsGzip(r.Header.Values("Accept-Encoding")) {
			// Each encoding is its own representation, with its own
			// strong ETag.
			body, tag = widgetGz, `"`+widgetVersion+`-gz"`
			h.Set("Content-Encoding", "gzip")
		}
		h.Set("ETag", tag)
		// ServeContent answers If-None-Match with 304, HEAD and ranges.
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	})
}

// acceptsGzip tells whether Accept-Encoding values vs take gzip (with
// no q=0 against it).
func acceptsGzip(vs []string) bool {
	for _, v := range vs {
		for _, part := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
				continue
			}
			q := strings.ReplaceAll(strings.ToLower(params), " ", "")
			return !strings.HasPrefix(q, "q=0") || strings.HasPrefix(q, "q=0.") && strings.Trim(q[4:], "0") != ""
		}
	}
	return false
}
