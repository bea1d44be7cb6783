package api_test

import (
	"context"
	"io/fs"
	"net/http"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestConsoleRevalidates: each file has an ETag of its own, and a request
// that names it gets 304 with no body (and the security headers); another
// tag gets the file. The same on `evs serve` and through the Lambda
// adapter.
func TestConsoleRevalidates(t *testing.T) {
	s := startStack(t)
	lambda := lambdaOf(api.ConsoleHandler(), nil, discard)
	// get answers a GET of the console's path p with the If-None-Match
	// header inm, by one deployment.
	type get func(p, inm string) (status int, h http.Header, body string)
	for name, do := range map[string]get{
		"evs serve": func(p, inm string) (int, http.Header, string) {
			h := http.Header{}
			if inm != "" {
				h.Set("If-None-Match", inm)
			}
			res, b := testkit.Get(t, s.base+p, h)
			return res.StatusCode, res.Header, string(b)
		},
		"lambda": func(p, inm string) (int, http.Header, string) {
			ev := event(api.ConsoleRootResource, p, nil)
			if rest := strings.TrimPrefix(p, api.ConsolePath); rest != "" {
				ev = event(api.ConsoleFilesResource, p, map[string]string{"proxy": rest})
			}
			if inm != "" {
				ev.Headers["If-None-Match"] = inm
			}
			resp, err := lambda(context.Background(), ev)
			if err != nil {
				t.Fatal(err)
			}
			h := http.Header{}
			for k, v := range resp.Headers {
				h.Set(k, v)
			}
			return resp.StatusCode, h, string(body(t, resp))
		},
	} {
		t.Run(name, func(t *testing.T) {
			paths := []string{api.ConsolePath}
			err := fs.WalkDir(api.ConsoleFiles(), ".", func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() && p != "index.html" {
					paths = append(paths, api.ConsolePath+p)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]string{}
			for _, p := range paths {
				status, h, b := do(p, "")
				tag := h.Get("ETag")
				if status != http.StatusOK || !strings.HasPrefix(tag, `"`) || len(tag) < 10 || b == "" {
					t.Fatalf("%s: %d ETag %q, %d bytes", p, status, tag, len(b))
				}
				if other, dup := seen[tag]; dup {
					t.Errorf("%s and %s share ETag %s", p, other, tag)
				}
				seen[tag] = p
				status, h, b = do(p, tag)
				if status != http.StatusNotModified || b != "" || h.Get("ETag") != tag {
					t.Errorf("%s with its tag: %d, ETag %q, %d bytes; want 304, the tag, no body", p, status, h.Get("ETag"), len(b))
				}
				checkHeaders(t, p+" (304)", h)
				if status, _, _ := do(p, `"stale"`); status != http.StatusOK {
					t.Errorf("%s with another tag: %d, want 200", p, status)
				}
			}
		})
	}
}
