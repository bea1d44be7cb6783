package main_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"testing"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestWidgetOnStack: the sign-up widget served by the real requests binary
// behind the template's routes under a stage prefix, with no key: the
// embedded script, gzipped for a browser that takes it (the function's
// base64 decoded as API Gateway decodes it), its caching headers, a 304 on
// its ETag; and its route opens nothing else.
func TestWidgetOnStack(t *testing.T) {
	w := newAWSWorld(t)
	base, _ := serveRequestsStage(t, w)
	script, version := testkit.Widget(t)

	for _, tc := range []struct {
		name, path, encoding, cache string
	}{
		{"plain", api.WidgetPath, "identity", "public, max-age=300"},
		{"gzip", api.WidgetPath, "gzip", "public, max-age=300"},
		{"pinned", api.WidgetPath + "?v=" + version, "gzip", "public, max-age=31536000, immutable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, b := testkit.Get(t, base+tc.path, http.Header{"Accept-Encoding": {tc.encoding}})
			if res.StatusCode != http.StatusOK {
				t.Fatalf("GET /Prod%s: %d %s", tc.path, res.StatusCode, b)
			}
			for k, want := range map[string]string{"Content-Type": "text/javascript; charset=utf-8", "X-Content-Type-Options": "nosniff",
				"Cross-Origin-Resource-Policy": "cross-origin", "Cache-Control": tc.cache} {
				if got := res.Header.Get(k); got != want {
					t.Errorf("%s %q, want %q", k, got, want)
				}
			}
			if tc.encoding == "gzip" {
				if res.Header.Get("Content-Encoding") != "gzip" {
					t.Fatalf("Content-Encoding %q, want gzip", res.Header.Get("Content-Encoding"))
				}
				zr, err := gzip.NewReader(bytes.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				if b, err = io.ReadAll(zr); err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(b, script) {
				t.Errorf("%d bytes, want the embedded script's %d", len(b), len(script))
			}
			if res, b := testkit.Get(t, base+tc.path, http.Header{"Accept-Encoding": {tc.encoding}, "If-None-Match": {res.Header.Get("ETag")}}); res.StatusCode != http.StatusNotModified || len(b) != 0 {
				t.Errorf("with its ETag: %d, %d bytes; want 304 and none", res.StatusCode, len(b))
			}
		})
	}
	// GET only, as the template says; the API beside it still wants a key.
	res, err := http.Post(base+api.WidgetPath, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode == http.StatusOK {
		t.Errorf("POST /Prod%s: 200; the route is GET only", api.WidgetPath)
	}
	if res, _ := testkit.Get(t, base+"/v1/requests", nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/requests without a key: %d, want 401", res.StatusCode)
	}
}
