package console_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// TestConsoleUnderStagePrefix: the console as API Gateway serves it, under
// a stage's path (/Prod/console/), here a real `evs serve` behind a proxy
// that serves only what is under /Prod/ and strips it. In a real browser,
// the redirect, the page's files and every API call it makes (a key, one
// verification, a pasted list to its results) stay under /Prod/: a call
// to /v1/... at the root would fail and be reported.
func TestConsoleUnderStagePrefix(t *testing.T) {
	exe := chromiumPath(t)
	s := startStack(t)
	target, err := url.Parse(s.base)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := strings.CutPrefix(r.URL.Path, "/Prod/")
		if !ok {
			http.Error(w, "not under the stage", http.StatusForbidden)
			return
		}
		r.URL.Path, r.URL.RawPath = "/"+p, ""
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	stage := "http://" + ln.Addr().String() + "/Prod"

	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()

	var bad problems
	var mu sync.Mutex
	var requested []string
	if err := chromedp.Listen(bctx, func(ev any) {
		bad.listen(ev)
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			mu.Lock()
			requested = append(requested, e.Request.URL)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("start chromium (%s): %v", exe, err)
	}
	if _, err := chromedp.Call(bctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, stepTimeout)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			page, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("%s: %v\npage problems: %v\npage:\n%s", what, err, bad.list, page)
		}
	}
	wait := func(what, js string) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, stepTimeout)
		defer cancel()
		if _, err := chromedp.Run(sctx, chromedp.Poll[bool](js, chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
			page, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("waiting for %s: %v\npage problems: %v\npage:\n%s", what, err, bad.list, page)
		}
	}

	run("open /Prod/console", chromedp.Navigate(stage+"/console"), chromedp.WaitVisible(chromedp.ID("key")))
	if p, err := chromedp.Run(bctx, chromedp.Evaluate[string](`location.pathname`)); err != nil || p != "/Prod/console/" {
		t.Errorf("the page is at %q (%v), want /Prod/console/", p, err)
	}
	run("enter the key", chromedp.SendKeys(chromedp.ID("key"), s.key), chromedp.Click(chromedp.ID("key-use")))
	run("verify one address", chromedp.SendKeys(chromedp.ID("verify-email"), "accepted_email@x.example"), chromedp.Click(chromedp.ID("verify-go")))
	wait("the verdict", `document.getElementById("verify-status").textContent === "deliverable"`)
	run("paste a list", chromedp.SendKeys(chromedp.ID("list-paste"), "accepted_email@x.example\nmailbox_full@x.example\n"),
		chromedp.Click(chromedp.ID("list-go")))
	wait("the list's results", `document.querySelectorAll("#results tbody tr").length === 2`)

	mu.Lock()
	defer mu.Unlock()
	var api int
	for _, u := range requested {
		if !strings.HasPrefix(u, stage+"/") {
			t.Errorf("request outside the stage: %s", u)
		}
		if strings.HasPrefix(u, stage+"/v1/") {
			api++
		}
	}
	// At least: verify, create, one poll, the results.
	if api < 4 {
		t.Errorf("%d API calls under the stage, want 4 or more: %v", api, requested)
	}
	bad.mu.Lock()
	defer bad.mu.Unlock()
	for _, p := range bad.list {
		t.Errorf("page problem: %s", p)
	}
}
