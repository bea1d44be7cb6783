// Package console serves the web console of `evs serve` at Path: plain
// HTML, CSS and JavaScript embedded in the binary, no build step, nothing
// fetched from anyone else. The page holds no server-side session: the
// user pastes an API key, the tab keeps it in sessionStorage and sends it
// as X-Api-Key to the same API every other client calls (contract,
// section 13).
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// Path is where the console is mounted; Path without its trailing slash
// redirects to it.
const Path = "/console/"

// CSP is the Content-Security-Policy of every console reply: scripts,
// styles, images and API calls from this origin only, no inline script
// or style, no framing, no form posted elsewhere.
const CSP = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"

//go:embed static
var static embed.FS

// Files is the console's file tree (index.html at its root), for tests
// that read every file.
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	return sub
}

// Handler serves the console under Path with its security headers; only
// GET and HEAD are answered.
func Handler() http.Handler {
	files := http.StripPrefix(strings.TrimSuffix(Path, "/"), http.FileServerFS(Files()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		// The files change only with the binary, and embedded files carry
		// no date to revalidate against: fetched afresh, so an upgrade is
		// seen at once (they are small).
		h.Set("Cache-Control", "no-cache")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "Use GET.", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == strings.TrimSuffix(Path, "/") {
			http.Redirect(w, r, Path, http.StatusMovedPermanently)
			return
		}
		files.ServeHTTP(w, r)
	})
}

// Serves tells whether path belongs to the console.
func Serves(path string) bool {
	return path == strings.TrimSuffix(Path, "/") || strings.HasPrefix(path, Path)
}
