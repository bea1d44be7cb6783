package api_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/evs-dev/evs/internal/api"
)

// widgetMaxGzip is the widget's size bound once gzipped (issue 40).
const widgetMaxGzip = 8 * 1024

// gunzip decompresses b, failing the test when it is not gzip.
func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not gzip: %v", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	return out
}

// checkWidgetHeaders checks what every 200 of the widget carries.
func checkWidgetHeaders(t *testing.T, what string, h http.Header, cacheControl string) {
	t.Helper()
	for k, want := range map[string]string{
		"Content-Type":                 "text/javascript; charset=utf-8",
		"X-Content-Type-Options":       "nosniff",
		"Cross-Origin-Resource-Policy": "cross-origin",
		"Access-Control-Allow-Origin":  "*",
		"Cache-Control":                cacheControl,
		"Vary":                         "Accept-Encoding",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s: %s %q, want %q", what, k, got, want)
		}
	}
	if h.Get("Access-Control-Allow-Credentials") != "" || h.Get("Set-Cookie") != "" {
		t.Errorf("%s: credentials or a cookie on a public file: %v", what, h)
	}
}

// TestWidgetServed: `evs serve` serves GET /widget.js with no key, cacheable
// (a short max-age unversioned, a year and immutable when ?v= pins its
// version), gzipped when asked and within 8 KB so, 304 on its ETag, and
// refuses other methods.
func TestWidgetServed(t *testing.T) {
	s := startStack(t)
	// The transport must not ask for gzip and undo it by itself: each
	// call says what it takes.
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	get := func(path string, h map[string]string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, s.base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header.Set(k, v)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res, b
	}
	short := "public, max-age=300"
	pinned := "public, max-age=31536000, immutable"
	v := api.WidgetVersion()
	if len(v) != 16 {
		t.Fatalf("version %q, want 16 hex digits", v)
	}

	tests := []struct {
		name, path, encoding string
		gz                   bool
		cache                string
	}{
		{"unversioned", api.WidgetPath, "", false, short},
		{"gzip", api.WidgetPath, "gzip, deflate, br", true, short},
		{"gzip refused", api.WidgetPath, "gzip;q=0, br", false, short},
		{"gzip with a weight", api.WidgetPath, "br, gzip; q=0.5", true, short},
		{"pinned", api.WidgetPath + "?v=" + v, "gzip", true, pinned},
		// A pin of another version is not this content: it gets it, but
		// only for the short time.
		{"pinned to another version", api.WidgetPath + "?v=0123456789abcdef", "", false, short},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, body := get(tc.path, map[string]string{"Accept-Encoding": tc.encoding})
			if res.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", res.StatusCode, body)
			}
			checkWidgetHeaders(t, tc.name, res.Header, tc.cache)
			tag := `"` + v + `"`
			if tc.gz {
				tag = `"` + v + `-gz"`
				if res.Header.Get("Content-Encoding") != "gzip" {
					t.Fatalf("Content-Encoding %q, want gzip", res.Header.Get("Content-Encoding"))
				}
				if len(body) > widgetMaxGzip {
					t.Errorf("widget is %d bytes gzipped, over %d", len(body), widgetMaxGzip)
				}
				body = gunzip(t, body)
			} else if res.Header.Get("Content-Encoding") != "" {
				t.Errorf("Content-Encoding %q, want none", res.Header.Get("Content-Encoding"))
			}
			if !bytes.Equal(body, api.WidgetScript()) {
				t.Errorf("body of %d bytes differs from the embedded script's %d", len(body), len(api.WidgetScript()))
			}
			if got := res.Header.Get("ETag"); got != tag {
				t.Errorf("ETag %q, want %q", got, tag)
			}
			// Revalidated: 304, no body, the same caching.
			res, body = get(tc.path, map[string]string{"Accept-Encoding": tc.encoding, "If-None-Match": tag})
			if res.StatusCode != http.StatusNotModified || len(body) != 0 {
				t.Errorf("If-None-Match %s: %d with %d bytes, want 304 and none", tag, res.StatusCode, len(body))
			}
			if res.Header.Get("ETag") != tag || res.Header.Get("Cache-Control") != tc.cache {
				t.Errorf("304: ETag %q Cache-Control %q", res.Header.Get("ETag"), res.Header.Get("Cache-Control"))
			}
		})
	}
	t.Logf("widget.js: %d bytes, %d gzipped (bound %d); version %s", len(api.WidgetScript()), len(api.WidgetGzipped()), widgetMaxGzip, v)

	// Another version's ETag is not a match.
	if res, _ := get(api.WidgetPath, map[string]string{"If-None-Match": `"0123456789abcdef"`}); res.StatusCode != http.StatusOK {
		t.Errorf("a stale ETag: %d, want 200", res.StatusCode)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		req, _ := http.NewRequest(m, s.base+api.WidgetPath, strings.NewReader("x"))
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %d Allow %q, want 405 and GET, HEAD", m, res.StatusCode, res.Header.Get("Allow"))
		}
	}
	req, _ := http.NewRequest(http.MethodHead, s.base+api.WidgetPath, nil)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("ETag") == "" {
		t.Errorf("HEAD: %d ETag %q", res.StatusCode, res.Header.Get("ETag"))
	}
	if res, _ := get("/widget.js/", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("/widget.js/: %d, want 404 (another path)", res.StatusCode)
	}
}

// TestWidgetScriptRules reads the script for what a strict CSP on the
// embedding page would refuse, or what would reach beyond the service:
// no eval, no inline style, no inline handler, no URL of its own (it
// calls only the origin it was loaded from), and never a secret key.
func TestWidgetScriptRules(t *testing.T) {
	src := string(api.WidgetScript())
	for _, bad := range []string{"eval(", "new Function", "setAttribute(\"style\"", ".style.", "cssText", "innerHTML", "insertAdjacentHTML",
		"document.write", "http://", "https://", "localStorage", "sessionStorage", "document.cookie", "setAttribute(\"on"} {
		if strings.Contains(src, bad) {
			t.Errorf("widget.js contains %q", bad)
		}
	}
	if !strings.Contains(src, `key.indexOf("evs_pk.") !== 0`) {
		t.Error("widget.js does not refuse a key other than a publishable one")
	}
}

// TestWidgetOnLambda: on the AWS stack the requests function, whose mux
// MountConsole builds, serves the widget on its resource with the headers
// of `evs serve`: gzip goes base64-encoded (API Gateway decodes it: every
// type is binary in the template), a pinned version is immutable, the
// ETag answers 304, and its log line names the route.
func TestWidgetOnLambda(t *testing.T) {
	var logs bytes.Buffer
	fn := lambdaOf(api.ConsoleHandler(), nil, slog.New(slog.NewJSONHandler(&logs, nil)))
	ev := func(path, encoding, inm string, query map[string]string) events.APIGatewayProxyRequest {
		e := event(api.WidgetPath, path, nil)
		if encoding != "" {
			e.Headers["Accept-Encoding"] = encoding
		}
		if inm != "" {
			e.Headers["If-None-Match"] = inm
		}
		e.QueryStringParameters = query
		return e
	}
	v := api.WidgetVersion()
	for _, tc := range []struct {
		name   string
		ev     events.APIGatewayProxyRequest
		status int
		gz     bool
		cache  string
	}{
		{"plain", ev(api.WidgetPath, "", "", nil), http.StatusOK, false, "public, max-age=300"},
		{"gzip", ev(api.WidgetPath, "gzip, deflate", "", nil), http.StatusOK, true, "public, max-age=300"},
		// Behind a custom domain's base path mapping the event's path has
		// the base path too; the resource names the file.
		{"under a base path", ev("/evs"+api.WidgetPath, "gzip", "", nil), http.StatusOK, true, "public, max-age=300"},
		{"pinned", ev(api.WidgetPath, "gzip", "", map[string]string{"v": v}), http.StatusOK, true, "public, max-age=31536000, immutable"},
		{"revalidated", ev(api.WidgetPath, "gzip", `"`+v+`-gz"`, nil), http.StatusNotModified, true, "public, max-age=300"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := fn(context.Background(), tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("%d, want %d", resp.StatusCode, tc.status)
			}
			h := http.Header{}
			for k, v := range resp.Headers {
				h.Set(k, v)
			}
			if tc.status == http.StatusNotModified {
				// A 304 carries no body's headers (net/http drops them).
				if h.Get("ETag") == "" || h.Get("Cache-Control") != tc.cache {
					t.Errorf("304: ETag %q Cache-Control %q", h.Get("ETag"), h.Get("Cache-Control"))
				}
			} else {
				checkWidgetHeaders(t, tc.name, h, tc.cache)
			}
			if h.Get("Content-Length") != "" {
				t.Errorf("Content-Length %q: API Gateway sets its own", h.Get("Content-Length"))
			}
			b := body(t, resp)
			if tc.status == http.StatusNotModified {
				if len(b) != 0 {
					t.Errorf("304 with %d bytes", len(b))
				}
				return
			}
			if tc.gz {
				if !resp.IsBase64Encoded || h.Get("Content-Encoding") != "gzip" {
					t.Fatalf("gzip reply: isBase64Encoded %v, Content-Encoding %q", resp.IsBase64Encoded, h.Get("Content-Encoding"))
				}
				b = gunzip(t, b)
			} else if resp.IsBase64Encoded {
				t.Error("the plain script went base64-encoded")
			}
			if !bytes.Equal(b, api.WidgetScript()) {
				t.Errorf("body of %d bytes differs from the embedded script's %d", len(b), len(api.WidgetScript()))
			}
		})
	}
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var c struct{ Msg, Route, AccountID string }
		if err := json.Unmarshal([]byte(l), &c); err != nil || c.Msg != "call" || c.Route != api.WidgetPath || c.AccountID != "" {
			t.Errorf("log line %s (%v), want route %s and no account", l, err, api.WidgetPath)
		}
	}
}
