package api_test

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestConsoleUnderStagePrefix: the console as API Gateway serves it, under
// a stage's path (/Prod/console/), here a real `evs serve` behind a proxy
// that serves only what is under /Prod/ and strips it. In a real browser,
// the redirect, the page's files and every API call it makes (a key, one
// verification, a pasted list to its results) stay under /Prod/: a call
// to /v1/... at the root would fail and be reported.
func TestConsoleUnderStagePrefix(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	target, err := url.Parse(s.base)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	stage := listen(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := strings.CutPrefix(r.URL.Path, "/Prod/")
		if !ok {
			http.Error(w, "not under the stage", http.StatusForbidden)
			return
		}
		r.URL.Path, r.URL.RawPath = "/"+p, ""
		rp.ServeHTTP(w, r)
	})) + "/Prod"

	p := openPageAt(t, stage+"/console")
	if got := eval[string](p, `location.pathname`); got != "/Prod/console/" {
		t.Errorf("the page is at %q, want /Prod/console/", got)
	}
	p.useKey(s.key)
	p.step("verify one address", chromedp.SendKeys(chromedp.ID("verify-email"), "accepted_email@x.example"), chromedp.Click(chromedp.ID("verify-go")))
	p.waitFor("the verdict", `document.getElementById("verify-status").textContent === "deliverable"`)
	p.step("paste a list", chromedp.SendKeys(chromedp.ID("list-paste"), "accepted_email@x.example\nmailbox_full@x.example\n"),
		chromedp.Click(chromedp.ID("list-go")))
	p.waitFor("the list's results", `document.querySelectorAll("#results tbody tr").length === 2`)

	var api int
	for _, r := range p.log.sent(0) {
		_, u, _ := strings.Cut(r, " ")
		if !strings.HasPrefix(u, stage+"/") {
			t.Errorf("request outside the stage: %s", r)
		}
		if strings.HasPrefix(u, stage+"/v1/") {
			api++
		}
	}
	// At least: verify, create, one poll, the results.
	if api < 4 {
		t.Errorf("%d API calls under the stage, want 4 or more: %v", api, p.log.sent(0))
	}
	p.done()
}
