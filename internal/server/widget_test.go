package server_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
)

// The contract's check reads the widget's body as the text it is.
func init() {
	openapi3filter.RegisterBodyDecoder("text/javascript", openapi3filter.PlainBodyDecoder)
}

// TestWidgetOnServe: `evs serve` answers GET /widget.js with no key as
// api/openapi.yaml says (the harness checks every reply against it), 304
// on its ETag, a wrong method with the contract's 405, and none of it
// counts as a failed authentication (which a key-less route must not).
func TestWidgetOnServe(t *testing.T) {
	h := start(t, options{})
	script, version := testkit.Widget(t)
	r := h.do(req{path: api.WidgetPath})
	if r.status != http.StatusOK || !bytes.Equal(r.body, script) {
		t.Fatalf("GET %s: %d, %d bytes; want 200 and the embedded %d", api.WidgetPath, r.status, len(r.body), len(script))
	}
	tag := r.header.Get("ETag")
	if r := h.do(req{path: api.WidgetPath + "?v=" + version, headers: map[string]string{"If-None-Match": tag}}); r.status != http.StatusNotModified {
		t.Errorf("If-None-Match %s: %d, want 304", tag, r.status)
	}
	if r := h.do(req{method: http.MethodPost, path: api.WidgetPath, body: "{}"}); r.status != http.StatusMethodNotAllowed || r.errorCode(t) != evs.CodeMethodNotAllowed || r.header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d Allow %q %s, want 405 method_not_allowed", r.status, r.header.Get("Allow"), r.body)
	}
	// Many more fetches than the failed-authentication limit (20 a
	// second from one address) allows: none is refused.
	for i := range 40 {
		if r := h.do(req{path: api.WidgetPath}); r.status != http.StatusOK {
			t.Fatalf("fetch %d: %d %s", i+1, r.status, r.body)
		}
	}
}
