// The web console, served at ConsolePath: plain HTML, CSS and JavaScript
// embedded in the binary, nothing fetched from anyone else. No server-side
// session: the tab keeps the pasted API key in sessionStorage and calls
// the same API every other client calls.

package api

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// ConsolePath is where the console is mounted; ConsolePath without its trailing slash
// redirects to it.
const ConsolePath = "/console/"

// ConsoleCSP is the Content-Security-Policy of every console reply on `evs
// serve`: scripts, styles, images and API calls from this origin only, no
// inline script or style, no framing, no form posted elsewhere.
const ConsoleCSP = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"

// ConsoleOptions is what differs between the places the console is served.
type ConsoleOptions struct {
	// UploadOrigin is the one other origin the page may call: the S3
	// bucket that pre-signed upload URLs point to on AWS (scheme, host and
	// port, such as "https://bucket.s3.us-east-1.amazonaws.com"). Empty on
	// `evs serve`, whose upload URLs are its own.
	UploadOrigin string
}

//go:embed static
var static embed.FS

// ConsoleFiles is the console's file tree (index.html at its root), for tests
// that read every file.
func ConsoleFiles() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	return sub
}

// ConsoleHandler serves the console under ConsolePath with its security headers, for
// `evs serve` (no other origin allowed); only GET and HEAD are answered.
func ConsoleHandler() http.Handler {
	h, err := NewConsole(ConsoleOptions{})
	if err != nil {
		panic(err) // no origin to refuse; the embedded files always read
	}
	return h
}

// NewConsole is ConsoleHandler with o: on AWS, the ConsoleCSP's connect-src also allows the
// upload bucket. An origin that is not scheme://host[:port] is an error.
func NewConsole(o ConsoleOptions) (http.Handler, error) {
	csp := ConsoleCSP
	if o.UploadOrigin != "" {
		origin, err := parseOrigin(o.UploadOrigin)
		if err != nil {
			return nil, err
		}
		csp += "; connect-src 'self' " + origin
	}
	files := http.StripPrefix(strings.TrimSuffix(ConsolePath, "/"), http.FileServerFS(ConsoleFiles()))
	tags, err := etags()
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		// The files change only with the binary: revalidated on every use,
		// so an upgrade is seen at once, against an ETag of their content
		// (embedded files carry no date), so an unchanged file costs a 304.
		h.Set("Cache-Control", "no-cache")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "Use GET.", http.StatusMethodNotAllowed)
			return
		}
		if tag, ok := tags[r.URL.Path]; ok {
			h.Set("ETag", tag)
		}
		if r.URL.Path == strings.TrimSuffix(ConsolePath, "/") {
			// Relative, so that it holds under any prefix: API Gateway's
			// /{stage}/console goes to /{stage}/console/. (http.Redirect
			// would make it absolute, from a path without the stage.)
			h.Set("Location", path.Base(ConsolePath)+"/")
			w.WriteHeader(http.StatusMovedPermanently)
			return
		}
		files.ServeHTTP(w, r)
	}), nil
}

// etags maps each file's path under ConsolePath (index.html's: ConsolePath itself) to a
// strong ETag of its content.
func etags() (map[string]string, error) {
	tags := map[string]string{}
	err := fs.WalkDir(ConsoleFiles(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(ConsoleFiles(), p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		tags[ConsolePath+p] = `"` + hex.EncodeToString(sum[:12]) + `"`
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("console: hashing the files: %w", err)
	}
	// The page is served at ConsolePath; index.html only redirects there.
	tags[ConsolePath] = tags[ConsolePath+"index.html"]
	delete(tags, ConsolePath+"index.html")
	return tags, nil
}

// parseOrigin checks that s is an origin, as a ConsoleCSP source takes it, and
// returns it in lower case.
func parseOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(u.Host, " ;,'*") {
		return "", fmt.Errorf("console: upload origin %q is not scheme://host[:port]", s)
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}
