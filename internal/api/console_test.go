package api_test

import (
	"io"
	"io/fs"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/api"
)

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// TestConsoleFilesServed: every embedded file is served under /console/ by
// a real server, without a key, with the security headers and its type.
func TestConsoleFilesServed(t *testing.T) {
	s := startStack(t)
	types := map[string]string{".html": "text/html", ".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml"}
	n := 0
	err := fs.WalkDir(api.ConsoleFiles(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		want, err := fs.ReadFile(api.ConsoleFiles(), path)
		if err != nil {
			return err
		}
		res, err := http.Get(s.base + api.ConsolePath + path)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return err
		}
		if res.StatusCode != http.StatusOK || string(body) != string(want) {
			t.Errorf("%s: status %d, %d bytes; want 200 and the embedded %d bytes", path, res.StatusCode, len(body), len(want))
		}
		checkHeaders(t, path, res.Header)
		ext := path[strings.LastIndex(path, "."):]
		if ct := res.Header.Get("Content-Type"); types[ext] == "" || !strings.HasPrefix(ct, types[ext]) {
			t.Errorf("%s: Content-Type %q, want %q", path, ct, types[ext])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Fatalf("%d files embedded, want index.html, its CSS and its script", n)
	}
}

func checkHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	csp := h.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-") {
		t.Errorf("%s: Content-Security-Policy %q, want default-src 'self' and nothing unsafe", what, csp)
	}
	if got := h.Get("X-Content-Type-Options"); got != "nosniff" {
		t.Errorf("%s: X-Content-Type-Options %q, want nosniff", what, got)
	}
	if got := h.Get("X-Frame-Options"); got != "DENY" {
		t.Errorf("%s: X-Frame-Options %q, want DENY", what, got)
	}
}

// TestConsoleEntryPoints: /console redirects to /console/, which serves
// the page; index.html redirects to the directory; other methods are
// refused; a missing file is 404; the API's routes are untouched.
func TestConsoleEntryPoints(t *testing.T) {
	s := startStack(t)
	for _, tc := range []struct {
		method, path string
		status       int
		location     string
	}{
		{"GET", "/console", http.StatusMovedPermanently, "console/"}, // relative: holds under a stage prefix
		{"GET", "/console/", http.StatusOK, ""},
		{"HEAD", "/console/", http.StatusOK, ""},
		{"GET", "/console/index.html", http.StatusMovedPermanently, "./"},
		{"POST", "/console/", http.StatusMethodNotAllowed, ""},
		{"GET", "/console/nothing.js", http.StatusNotFound, ""},
		{"GET", "/v1/verify", http.StatusUnauthorized, ""}, // still the API, key required
	} {
		req, err := http.NewRequest(tc.method, s.base+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.status || res.Header.Get("Location") != tc.location {
			t.Errorf("%s %s: %d Location %q, want %d %q", tc.method, tc.path, res.StatusCode, res.Header.Get("Location"), tc.status, tc.location)
		}
		if strings.HasPrefix(tc.path, "/console") {
			checkHeaders(t, tc.method+" "+tc.path, res.Header)
		}
	}
}

// TestConsoleNoExternalOrInline: no file names another origin (no
// third-party request, whatever the CSP says), and the page has no inline
// script, style or event handler, which the CSP would block anyway.
func TestConsoleNoExternalOrInline(t *testing.T) {
	url := regexp.MustCompile(`(?i)\b(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	inline := regexp.MustCompile(`(?i)<script>|<script[^>]*>[^<]+</script>|<style|\sstyle=|\son[a-z]+=|javascript:`)
	err := fs.WalkDir(api.ConsoleFiles(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(api.ConsoleFiles(), path)
		if err != nil {
			return err
		}
		for _, m := range url.FindAllString(string(b), -1) {
			// The SVG namespace is a name, never fetched.
			if m != "http://www.w3.org" {
				t.Errorf("%s names another origin: %s", path, m)
			}
		}
		if strings.HasSuffix(path, ".html") {
			if m := inline.FindString(string(b)); m != "" {
				t.Errorf("%s has inline code or style: %q", path, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
