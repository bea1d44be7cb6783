package server_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestRootSendsToConsole: GET / on `evs serve` sends a browser on to the
// console, with a relative Location (which keeps an API Gateway stage's
// prefix on AWS); other methods on / are not a route.
func TestRootSendsToConsole(t *testing.T) {
	h := start(t, options{})
	// The root is no route of the API's contract: asked without the
	// harness, which holds every reply to it, and without following.
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(h.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 302 || resp.Header.Get("Location") != "console/" {
		t.Fatalf("GET /: %d %v", resp.StatusCode, resp.Header)
	}
	page, err := c.Get(h.base + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if page.StatusCode != 200 || !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("the console: %d %v", page.StatusCode, page.Header)
	}
	resp, err = c.Post(h.base+"/", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Fatalf("POST /: %d, want an error", resp.StatusCode)
	}
}
