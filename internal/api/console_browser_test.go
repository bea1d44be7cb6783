package api_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/server"
)

// browserTimeout bounds a whole browser test, so that CI never hangs on
// a browser that does not answer. Generous: under -race, beside every
// other package's tests on two cores, the 15,000-address list takes
// tens of seconds.
const browserTimeout = 3 * time.Minute

// stepTimeout bounds one step (the 15,000-address list's upload and
// verification are the slowest: about a minute under -race on a loaded
// 2-core machine, where a one-minute bound once cut it at 93%).
const stepTimeout = 3 * time.Minute

// widths are the screen widths every screen is shot and checked at: a
// phone's and a desktop's.
var widths = []int64{375, 1280}

// chromiumPath finds the browser `make chromium` installs (Debian's
// chromium); the test fails without it rather than skip, as `make test`
// installs it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: run `make chromium` (Debian: apt-get install chromium)")
	return ""
}

// screenshotDir is where the screenshots go: $EVS_SCREENSHOTS when set (to
// look at them after the run), else a temporary directory.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("EVS_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("EVS_SCREENSHOTS: %v", err)
		}
		return d
	}
	return t.TempDir()
}

// pageLog gathers what the page must never do — console errors, uncaught
// exceptions, CSP violations (logged as errors), failed loads and HTTP
// error replies — and every request it sends.
type pageLog struct {
	mu       sync.Mutex
	problems []string
	requests []string // "METHOD URL"
	// keyed are the requests among them that carried X-Api-Key.
	keyed map[string]bool
	// urls name the requests, for a failed load's problem.
	urls map[network.RequestID]string
}

func (p *pageLog) add(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.problems = append(p.problems, fmt.Sprintf(format, args...))
}

func (p *pageLog) listen(ev any) {
	switch e := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		desc := ""
		if d.Exception != nil {
			desc = d.Exception.Description
		}
		p.add("exception: %s %s (%s:%d)", d.Text, desc, d.URL, d.LineNumber+1)
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning {
			p.add("console.%s called", e.Type)
		}
	case *log.EventEntryAdded:
		if e.Entry.Level == log.EntryLevelError || e.Entry.Level == log.EntryLevelWarning {
			p.add("browser log %s: %s (%s)", e.Entry.Level, e.Entry.Text, e.Entry.URL)
		}
	case *network.EventLoadingFailed:
		p.mu.Lock()
		u := p.urls[e.RequestID]
		p.mu.Unlock()
		p.add("load failed: %s %s (%s)", e.ErrorText, e.BlockedReason, u)
	case *network.EventResponseReceived:
		if e.Response.Status >= 400 {
			p.add("HTTP %d for %s", e.Response.Status, e.Response.URL)
		}
	case *network.EventRequestWillBeSent:
		p.mu.Lock()
		r := e.Request.Method + " " + e.Request.URL
		if p.urls == nil {
			p.urls = map[network.RequestID]string{}
		}
		p.urls[e.RequestID] = r
		p.requests = append(p.requests, r)
		for h := range e.Request.Headers {
			if strings.EqualFold(h, "X-Api-Key") {
				if p.keyed == nil {
					p.keyed = map[string]bool{}
				}
				p.keyed[r] = true
			}
		}
		p.mu.Unlock()
	}
}

// sent returns the requests sent since the first from of them.
func (p *pageLog) sent(from int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.requests[min(from, len(p.requests)):]...)
}

// withKey tells whether the request r ("METHOD URL") carried X-Api-Key.
func (p *pageLog) withKey(r string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.keyed[r]
}

// page is a headless Chromium on the console of one stack.
type page struct {
	t                *testing.T
	ctx, bctx        context.Context
	log              *pageLog
	shots, downloads string
}

// openPage starts Chromium with downloads going to a temporary directory
// and opens the console of s.
func openPage(t *testing.T, s stack) *page {
	t.Helper()
	return openPageAt(t, s.base+api.ConsolePath)
}

// openPageAt is openPage for the console at url: under a stage's prefix,
// or served by another handler.
func openPageAt(t *testing.T, url string) *page {
	t.Helper()
	p := startBrowser(t)
	p.downloads = t.TempDir()
	if _, err := chromedp.CallBrowser(p.bctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: p.downloads,
		BrowserContextID: chromedp.FromContext(p.bctx).BrowserContextID}); err != nil {
		t.Fatal(err)
	}
	p.step("open the console", chromedp.Navigate(url), chromedp.WaitVisible(chromedp.ID("key")))
	return p
}

// chromium is the headless Chromium of the package's browser tests: one
// process, started by the first test that asks for it (a start costs
// seconds), in which each test opens a tab in a browser context of its own
// (cookies, storage and cache of its own, disposed of with the tab).
// TestMain stops it.
var chromium struct {
	once  sync.Once
	ctx   context.Context // the browser's chromedp context
	stop  func()
	err   error
	tries []string // why a start failed, before one succeeded
}

// sharedChromium returns the context of the package's Chromium, starting
// it the first time.
func sharedChromium(t *testing.T) context.Context {
	t.Helper()
	exe := chromiumPath(t)
	chromium.once.Do(func() {
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.Headless,
			chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
		// On a loaded machine chromium now and then exits before it prints
		// its DevTools address (once in some thirty starts while this test
		// was written): that is the browser's start, not the page, so it is
		// tried three times.
		for attempt := 1; attempt <= 3; attempt++ {
			actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
			bctx, cancelBrowser := chromedp.NewContext(actx)
			// The first Do starts the browser and binds its life to the
			// context it is given: bctx, with no deadline; the start's is
			// kept here.
			started := make(chan error, 1)
			go func() { started <- chromedp.Do(bctx) }()
			var err error
			select {
			case err = <-started:
			case <-time.After(browserTimeout):
				err = fmt.Errorf("no start within %v", browserTimeout)
			}
			if err == nil {
				chromium.ctx, chromium.stop, chromium.err = bctx, func() { cancelBrowser(); cancelAlloc() }, nil
				return
			}
			cancelBrowser()
			cancelAlloc()
			chromium.err = fmt.Errorf("start chromium (%s), three times: %w", exe, err)
			chromium.tries = append(chromium.tries, fmt.Sprintf("attempt %d: %v", attempt, err))
		}
	})
	if chromium.err != nil {
		t.Fatalf("%v (%s)", chromium.err, strings.Join(chromium.tries, "; "))
	}
	return chromium.ctx
}

// stopChromium ends the package's Chromium, if a test started it.
func stopChromium() {
	if chromium.stop != nil {
		chromium.stop()
	}
}

// startBrowser opens a tab of the package's headless Chromium, in a
// browser context of its own, whose page events and log entries go to the
// page's log, for the console and widget tests. The test's whole use of it
// is bounded by browserTimeout.
func startBrowser(t *testing.T) *page {
	t.Helper()
	tab, closeTab := chromedp.NewContext(sharedChromium(t), chromedp.WithNewBrowserContext())
	t.Cleanup(closeTab)
	ctx, cancel := context.WithTimeout(tab, browserTimeout)
	t.Cleanup(cancel)
	p := &page{t: t, ctx: ctx, bctx: ctx, log: &pageLog{}, shots: screenshotDir(t)}
	if err := chromedp.Listen(p.bctx, p.log.listen); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	if _, err := chromedp.Call(p.bctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(p.bctx, log.Enable, struct{}{}); err != nil {
		t.Fatal(err)
	}
	return p
}

// stuck ends the test with what the page showed, when a step did not
// finish in its share of the time.
func (p *page) stuck(what string, err error) {
	p.t.Helper()
	shown, perr := chromedp.Run(p.bctx, chromedp.Evaluate[string](`document.body.innerText`))
	if perr != nil {
		shown = perr.Error()
	}
	p.log.mu.Lock()
	defer p.log.mu.Unlock()
	p.t.Fatalf("%s: %v\npage problems so far: %v\npage:\n%s", what, err, p.log.problems, shown)
}

func (p *page) step(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	sctx, cancel := context.WithTimeout(p.bctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		p.stuck(what, err)
	}
}

func (p *page) text(id string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.bctx, chromedp.Text(chromedp.ID(id)))
	if err != nil {
		p.t.Fatalf("text of #%s: %v", id, err)
	}
	return strings.TrimSpace(v)
}

func (p *page) waitFor(what, js string) {
	p.t.Helper()
	sctx, cancel := context.WithTimeout(p.bctx, stepTimeout)
	defer cancel()
	// The step's context bounds the wait: chromedp's own polling timeout
	// (30 s unless told) gave up on a 60,000-address list before the
	// step did.
	if _, err := chromedp.Run(sctx, chromedp.Poll[bool](js, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(0))); err != nil {
		p.stuck("waiting for "+what, err)
	}
}

func eval[T any](p *page, js string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.bctx, chromedp.Evaluate[T](js))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// setField sets a field's value as a user's choice does, change event
// included.
func setField(id, v string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(function(f){f.value=%q;f.dispatchEvent(new Event("change"));})(document.getElementById(%q))`, v, id))
}

// shoot writes the screen as it is at each width (name-375.png,
// name-1280.png) and checks that nothing is wider than the screen: no
// sideways scrolling on a phone. It leaves the page at the widest.
func (p *page) shoot(name string) {
	p.t.Helper()
	for _, w := range widths {
		p.step(fmt.Sprintf("resize to %d", w), chromedp.EmulateViewport(w, 800))
		png, err := chromedp.Run(p.bctx, chromedp.FullScreenshot(100)) // quality 100: PNG
		if err != nil {
			p.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p.shots, fmt.Sprintf("%s-%d.png", name, w)), png, 0o644); err != nil {
			p.t.Fatal(err)
		}
		if sw := eval[int64](p, `document.documentElement.scrollWidth`); sw > w {
			p.t.Errorf("%s at %d px: the page is %d px wide", name, w, sw)
		}
	}
}

// done reports every page problem seen.
func (p *page) done() {
	p.t.Helper()
	p.t.Logf("screenshots in %s", p.shots)
	p.log.mu.Lock()
	defer p.log.mu.Unlock()
	for _, pr := range p.log.problems {
		p.t.Errorf("page problem: %s", pr)
	}
}

// useKey enters the key as a person pastes it.
func (p *page) useKey(key string) {
	p.t.Helper()
	p.step("enter the key", chromedp.SendKeys(chromedp.ID("key"), key), chromedp.Click(chromedp.ID("key-use")))
	p.waitFor("the key in use", `document.getElementById("key-state").textContent.includes("A key is in use")`)
}

// finished waits for the batch on the page to be final with its bar full
// and its reasons counted.
func (p *page) finished(what string) {
	p.t.Helper()
	p.waitFor(what+" at 100%", `(function(){var p=document.getElementById("batch-progress");
		return !document.getElementById("batch-final").hidden && p.value === p.max;})()`)
	p.waitFor(what+": reasons counted", `document.getElementById("reasons-state").textContent.includes("by reason")`)
}

// chart reads a breakdown as the page shows it, label → count, from the
// SVG and from the table beside it, and fails when they differ or the
// chart has no accessible name.
func (p *page) chart(id string) map[string]string {
	p.t.Helper()
	got := eval[map[string][]string](p, fmt.Sprintf(`(function(box){
		var svg = box.querySelector("svg");
		return {
			svg: Array.from(svg.querySelectorAll("g")).map(function(g){ return g.dataset.label + "=" + g.dataset.count; }),
			table: Array.from(box.querySelectorAll("table tbody tr")).map(function(r){ return r.cells[0].textContent + "=" + r.cells[1].textContent; }),
			name: [svg.getAttribute("role") + "|" + svg.getAttribute("aria-label") + "|" + (svg.querySelector("title") || {}).textContent]
		};})(document.getElementById(%q))`, id))
	if fmt.Sprint(got["svg"]) != fmt.Sprint(got["table"]) {
		p.t.Errorf("#%s: chart %v, table %v: the table must say what the chart shows", id, got["svg"], got["table"])
	}
	if name := got["name"][0]; !strings.HasPrefix(name, "img|Addresses by") || strings.Count(name, "Addresses by") != 2 {
		p.t.Errorf("#%s: chart role|aria-label|title = %q; want an image named by a label and a title", id, name)
	}
	m := map[string]string{}
	for _, kv := range got["svg"] {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// checkBreakdowns compares the page's two breakdowns of batch id with the
// API's: by status with the batch's counters, by reason with its CSV
// results. It returns the reason counts.
func checkBreakdowns(t *testing.T, p *page, s stack, id string) map[string]int {
	t.Helper()
	var env struct {
		Counters map[string]int `json:"counters"`
	}
	if err := json.Unmarshal(s.get(t, "/v1/requests/"+id, "application/json"), &env); err != nil {
		t.Fatal(err)
	}
	wantStatus := map[string]string{}
	for _, st := range []string{"deliverable", "undeliverable", "risky", "unknown"} {
		wantStatus[st] = fmt.Sprint(env.Counters[st])
	}
	if got := p.chart("breakdown"); fmt.Sprint(got) != fmt.Sprint(wantStatus) {
		t.Errorf("breakdown by status %v, the API's counters %v", got, wantStatus)
	}
	rows, err := csv.NewReader(bytes.NewReader(s.get(t, "/v1/requests/"+id+"/results?layout=results", "text/csv"))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, r := range rows[1:] {
		reasons[r[2]]++
	}
	want := map[string]string{}
	for r, n := range reasons {
		want[r] = fmt.Sprint(n)
	}
	if got := p.chart("breakdown-reasons"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("breakdown by reason %v, the API's results %v", got, want)
	}
	return reasons
}

// download clicks button and returns the file the browser saved as name.
func (p *page) download(button, name string) []byte {
	p.t.Helper()
	p.step("download "+name, chromedp.Click(chromedp.ID(button)))
	path := filepath.Join(p.downloads, name)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil {
			return b
		}
		select {
		case <-p.ctx.Done():
			p.t.Fatalf("no download %s in %s: %v", name, p.downloads, p.ctx.Err())
		case <-tick.C:
		}
	}
}

// TestConsoleInBrowser drives the console in a real headless Chromium
// against a real server: labels and the keyboard's order, the key, one
// verification and its suggestion, a dropped CSV of every test-mode
// outcome through to 100% with both breakdowns checked against the API, a
// list over the batch body's limits sent through /v1/uploads, both
// downloads compared byte for byte with the API's CSV, a pasted list, and
// each screen at a phone's and a desktop's width.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	p := openPage(t, s)

	// Every control has a name a screen reader reads, and can be reached
	// by the keyboard (no negative tabindex).
	unnamed := eval[[]string](p, `Array.from(document.querySelectorAll("input, select, textarea, button"))
		.filter(function(c){ return c.tabIndex < 0 || !((c.labels && c.labels.length) || c.getAttribute("aria-label") || (c.tagName === "BUTTON" && c.textContent.trim())); })
		.map(function(c){ return c.id || c.name || c.tagName; })`)
	if len(unnamed) != 0 {
		t.Errorf("controls without a label or out of the tab order: %v", unnamed)
	}
	// The tab key walks the controls in the page's order.
	p.step("focus the key field", chromedp.Focus(chromedp.ID("key")))
	var order []string
	for range 12 {
		p.step("press tab", chromedp.KeyEvent("\t"))
		order = append(order, eval[string](p, `document.activeElement.id || document.activeElement.name || document.activeElement.tagName`))
	}
	want := []string{"key-use", "key-forget", "verify-email", "verify-mode", "verify-go", "list-file", "list-paste", "list-name", "list-mode", "list-go"}
	if got := strings.Join(order, " "); !strings.Contains(got, strings.Join(want, " ")) {
		t.Errorf("tab order from the key field: %s; want %s in that order", got, strings.Join(want, " "))
	}

	// A key the server does not know: the API's refusal (of the list of
	// past batches the key brings) in words, with its request id, and the
	// key dropped (TestConsoleFirstTryInBrowser checks the key's state).
	// The reports of the expected 401s (and the browser's log lines about
	// them) are not page problems.
	p.step("enter an unknown key", chromedp.SendKeys(chromedp.ID("key"), "evs."+strings.Repeat("A", 43)), chromedp.Click(chromedp.ID("key-use")),
		chromedp.WaitVisible(chromedp.ID("error")))
	p.waitFor("the key refused", `document.getElementById("key-state").textContent.includes("refused")`)
	msg := p.text("error")
	if !regexp.MustCompile(`unauthorized, HTTP 401, request id [0-9a-f-]{36}`).MatchString(msg) {
		t.Errorf("error shown as %q; want the code, the HTTP status and the request id", msg)
	}
	p.log.mu.Lock()
	kept := p.log.problems[:0]
	for _, pr := range p.log.problems {
		if !strings.Contains(pr, "401") || !strings.Contains(pr, "/v1/verify") && !strings.Contains(pr, "/v1/requests?limit=") {
			kept = append(kept, pr)
		}
	}
	p.log.problems = kept
	p.log.mu.Unlock()
	p.step("forget it", chromedp.Click(chromedp.ID("key-forget")), setField("verify-email", ""))

	p.useKey(s.key)
	if v, err := chromedp.Run(p.bctx, chromedp.Value(chromedp.ID("key"))); err != nil || v != "" {
		t.Errorf("the key field still holds %d characters (%v): the key should leave it once stored", len(v), err)
	}

	p.step("verify one address", chromedp.SendKeys(chromedp.ID("verify-email"), "team+rejected_email@x.example"),
		chromedp.Click(chromedp.ID("verify-go")))
	p.waitFor("the verdict", `!document.getElementById("verify-result").hidden && document.getElementById("verify-status").textContent !== ""`)
	if got, reason := p.text("verify-status"), p.text("verify-reason"); got != "undeliverable" || !strings.HasPrefix(reason, "rejected_email") {
		t.Errorf("verdict %q, reason %q; want undeliverable, rejected_email", got, reason)
	}
	if ev := p.text("verify-evidence"); !strings.Contains(ev, "smtp") {
		t.Errorf("evidence %q does not show the SMTP check", ev)
	}

	// A typo of a well-known domain: the suggestion is a button that
	// verifies the corrected address.
	p.step("verify a typo", setField("verify-email", ""), chromedp.SendKeys(chromedp.ID("verify-email"), "someone@gmial.com"),
		chromedp.Click(chromedp.ID("verify-go")), chromedp.WaitVisible(chromedp.ID("verify-suggestion-use")))
	if got := p.text("verify-suggestion-use"); got != "someone@gmail.com" {
		t.Errorf("suggestion %q, want someone@gmail.com", got)
	}
	p.step("follow the suggestion", chromedp.Click(chromedp.ID("verify-suggestion-use")))
	p.waitFor("the suggestion's verdict", `document.getElementById("verify-normalized").textContent === "someone@gmail.com"`)
	p.shoot("console-verify")

	// A CSV of every test-mode outcome and a duplicate, dropped on the
	// form as a file dragged from the desktop.
	var list strings.Builder
	list.WriteString("email\n")
	for _, r := range evs.Reasons() {
		fmt.Fprintf(&list, "team+%s@x.example\n", r)
	}
	list.WriteString("team+accepted_email@X.Example\n") // the same address: domains are case-blind
	// Three that are no addresses, which the results' CSV quotes: a
	// comma, quotes and a line break inside a field, for the page's count.
	tricky := []string{"\"weird,name@x.example\"", "\"say \"\"hi\"\"@x.example\"", "\"line\nbreak@x.example\""}
	list.WriteString(strings.Join(tricky, "\n") + "\n")
	p.step("drop a list", chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(function(){
		var dt = new DataTransfer();
		dt.items.add(new File([%q], "outcomes.csv", {type: "text/csv"}));
		var f = document.getElementById("list-form");
		f.dispatchEvent(new DragEvent("dragover", {dataTransfer: dt, bubbles: true, cancelable: true}));
		f.dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true, cancelable: true}));
	})()`, list.String())))
	if got := p.text("list-file-name"); !strings.HasPrefix(got, "outcomes.csv") {
		t.Errorf("after the drop the page names the file %q, want outcomes.csv", got)
	}
	p.step("start it", chromedp.Click(chromedp.CSS(`input[name=list-mode][value=full]`)), chromedp.Click(chromedp.ID("list-go")),
		chromedp.WaitVisible(chromedp.ID("batch")))
	p.finished("the dropped list")
	n := len(evs.Reasons()) + len(tricky)
	if got := p.text("batch-done"); !strings.Contains(got, fmt.Sprintf("%d of %d", n, n)) || !strings.Contains(got, "(100%)") {
		t.Errorf("progress says %q, want %d of %d (100%%)", got, n, n)
	}
	if got := p.text("count-duplicates"); got != "1" {
		t.Errorf("duplicates %q, want 1", got)
	}
	id := p.text("batch-id")
	reasons := checkBreakdowns(t, p, s, id)
	for _, r := range evs.Reasons() {
		if want := map[bool]int{true: 1 + len(tricky), false: 1}[r == evs.ReasonInvalidSyntax]; reasons[string(r)] != want {
			t.Errorf("reason %s: %d results, want %d (the list has each outcome once, and %d invalid lines)", r, reasons[string(r)], want, len(tricky))
		}
	}
	p.waitFor("the results table", fmt.Sprintf(`document.querySelectorAll("#results tbody tr").length === %d`, n))
	p.step("filter deliverable", setField("results-filter", "deliverable"))
	p.waitFor("the filtered table", `(function(){var r=document.querySelectorAll("#results tbody tr");
		return r.length === 1 && r[0].cells[1].textContent === "deliverable";})()`)
	// Reason and flag filters, against the API's results.
	p.step("filter greylisted", setField("results-filter", ""), setField("results-reason", "greylisted"))
	p.waitFor("the greylisted row", `(function(){var r=document.querySelectorAll("#results tbody tr");
		return r.length === 1 && r[0].cells[2].textContent === "greylisted";})()`)
	var all struct {
		Results []struct {
			Email    string
			Decision struct{ Flags map[string]bool }
		}
	}
	if err := json.Unmarshal(s.get(t, "/v1/requests/"+id+"/results?limit=1000", "application/json"), &all); err != nil {
		t.Fatal(err)
	}
	var disposable []string
	for _, r := range all.Results {
		if r.Decision.Flags["disposable"] {
			disposable = append(disposable, r.Email)
		}
	}
	p.step("filter disposable", setField("results-reason", ""), setField("results-flag", "disposable"))
	p.waitFor("the disposable rows", fmt.Sprintf(`(function(){var r=document.querySelectorAll("#results tbody tr");
		return r.length === %d && Array.from(r).every(function(tr){ return tr.cells[4].textContent.includes("disposable"); });})()`, len(disposable)))
	if got := eval[[]string](p, `Array.from(document.querySelectorAll("#results tbody tr")).map(function(tr){ return tr.cells[0].textContent; })`); len(disposable) == 0 || fmt.Sprint(got) != fmt.Sprint(disposable) {
		t.Errorf("disposable filter shows %v, the API's disposable results are %v", got, disposable)
	}
	p.shoot("console-list")

	// A list picked from disk, over the size the console sends in a
	// batch's body (256 KiB): it goes through /v1/uploads. (Uploads of more
	// addresses than a body may hold are the API's tests'.)
	const big = 15_000
	var b strings.Builder
	b.WriteString("email\n")
	for i := range big {
		fmt.Fprintf(&b, "user%d@x%d.example\n", i, i%50)
	}
	b.WriteString("accepted_email@big.example\nteam+accepted_email@big.example\nrejected_email@big.example\nuser7@x7.example\n")
	bigPath := filepath.Join(t.TempDir(), "big.csv")
	if err := os.WriteFile(bigPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	mark := len(p.log.sent(0))
	p.step("pick a big list", chromedp.SetUploadFiles(chromedp.ID("list-file"), []string{bigPath}),
		chromedp.Click(chromedp.CSS(`input[name=list-mode][value=quick]`)), chromedp.Click(chromedp.ID("list-go")))
	p.waitFor("the big list's batch", fmt.Sprintf(`document.getElementById("count-total").textContent === "%d"`, big+4))
	p.finished("the big list")
	sent := strings.Join(p.log.sent(mark), "\n")
	for _, re := range []string{`(?m)^POST \S+/v1/uploads$`, `(?m)^PUT ` + regexp.QuoteMeta(s.base) + `/v1/uploads/[0-9a-f-]{36}\?token=\S+$`, `(?m)^POST \S+/v1/requests$`} {
		if !regexp.MustCompile(re).MatchString(sent) {
			t.Errorf("the big list's requests lack %s:\n%s", re, sent)
		}
	}
	if got := p.text("batch-done"); !strings.Contains(got, fmt.Sprintf("%d of %d", big+3, big+3)) {
		t.Errorf("big list: progress says %q, want %d of %d", got, big+3, big+3)
	}
	id = p.text("batch-id")
	checkBreakdowns(t, p, s, id)
	p.shoot("console-upload")

	// The downloads are the API's CSV, byte for byte.
	for _, d := range []struct{ button, name, query string }{
		{"download-all", "evs-" + id + ".csv", ""},
		{"download-deliverable", "evs-" + id + "-deliverable.csv", "?status=deliverable"},
	} {
		mark := len(p.log.sent(0))
		got := p.download(d.button, d.name)
		want := s.get(t, "/v1/requests/"+id+"/results"+d.query, "text/csv")
		// Through an export link: asked for with the key, fetched
		// without it.
		var link, file string
		for _, r := range p.log.sent(mark) {
			switch {
			case strings.HasSuffix(r, "/v1/requests/"+id+"/export"+d.query):
				link = r
			case regexp.MustCompile(`^GET ` + regexp.QuoteMeta(s.base) + `/v1/exports/[0-9a-f-]{36}\?token=\S+$`).MatchString(r):
				file = r
			}
		}
		if link == "" || file == "" || !p.log.withKey(link) || p.log.withKey(file) {
			t.Errorf("%s: want GET .../export%s with the key, then GET /v1/exports/... without it; sent:\n%s",
				d.name, d.query, strings.Join(p.log.sent(mark), "\n"))
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes downloaded, the API's CSV has %d, and they differ", d.name, len(got), len(want))
		}
		// The list's own rows come back, its repeat of user7 included.
		if lines := bytes.Count(got, []byte("\n")); d.query != "" && lines != 3 || d.query == "" && lines != big+5 {
			t.Errorf("%s: %d lines", d.name, lines)
		}
	}

	// A pasted list, in quick mode: no SMTP, so a plain address is not
	// checked, and a named outcome keeps its reason.
	p.step("paste a list", setField("list-file", ""), setField("list-paste", "someone@x.example,\n  mailbox_full@x.example\n"),
		chromedp.Click(chromedp.CSS(`input[name=list-mode][value=quick]`)), chromedp.Click(chromedp.ID("list-go")))
	p.waitFor("the pasted list done", `(function(){var p=document.getElementById("batch-progress");
		return !document.getElementById("batch-final").hidden && p.value === p.max && document.getElementById("count-total").textContent === "2";})()`)
	if got := p.text("batch-done"); !strings.Contains(got, "2 of 2") {
		t.Errorf("pasted list: progress says %q, want 2 of 2", got)
	}
	if u, r := p.text("count-unknown"), p.text("count-risky"); u != "1" || r != "1" {
		t.Errorf("pasted list in quick mode: unknown %s, risky %s; want 1 and 1", u, r)
	}
	// A new list shows all its rows, whatever the last list's filter was.
	p.waitFor("the pasted list's table", `document.querySelectorAll("#results tbody tr").length === 2`)

	// A pasted list over 256 KiB goes through an upload too, as JSON.
	const pasted = 15_000
	mark = len(p.log.sent(0))
	p.step("paste a long list", setField("list-paste", longList(pasted)), chromedp.Click(chromedp.ID("list-go")))
	p.waitFor("the long list's batch", fmt.Sprintf(`document.getElementById("count-total").textContent === "%d"`, pasted))
	p.finished("the long list")
	sent = strings.Join(p.log.sent(mark), "\n")
	if !regexp.MustCompile(`(?m)^PUT ` + regexp.QuoteMeta(s.base) + `/v1/uploads/[0-9a-f-]{36}\?token=\S+$`).MatchString(sent) {
		t.Errorf("the long pasted list was not uploaded:\n%s", sent)
	}
	p.done()
}

// longList is n addresses one a line: over 256 KiB from about 11,000, so
// that the page sends them through an upload.
func longList(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "pasted-user%d@x.example\n", i)
	}
	return b.String()
}

// TestConsoleUploadElsewhereInBrowser: when the server hands out upload
// URLs of another origin (EVS_PUBLIC_URL names an address other than the
// one the console was opened at), the page says where to open the console
// instead of trying a request its Content-Security-Policy forbids.
func TestConsoleUploadElsewhereInBrowser(t *testing.T) {
	t.Parallel()
	s := startStack(t, func(o *server.Options) { o.Config.PublicURL = "https://evs.example" })
	p := openPage(t, s)
	p.useKey(s.key)
	mark := len(p.log.sent(0))
	p.step("paste a long list", setField("list-paste", longList(15_000)), chromedp.Click(chromedp.ID("list-go")),
		chromedp.WaitVisible(chromedp.ID("error")))
	if got := p.text("error"); !strings.Contains(got, "https://evs.example: open the console there") {
		t.Errorf("error %q, want where to open the console", got)
	}
	sent := strings.Join(p.log.sent(mark), "\n")
	if strings.Contains(sent, "evs.example") || strings.Contains(sent, "PUT ") || !strings.Contains(sent, "POST "+s.base+"/v1/uploads") {
		t.Errorf("requests after the paste:\n%s\nwant the upload made and nothing sent to its URL", sent)
	}
	if got := eval[bool](p, `document.getElementById("batch").hidden && !document.getElementById("list-go").disabled`); !got {
		t.Error("the page shows a batch, or its button stays disabled, after a refused upload")
	}
	p.done()
}

// TestConsoleCancelAndPastInBrowser follows a batch that cannot finish by
// itself while the test runs (a greylisted address retried for minutes):
// the counters and an estimate of the time left while it runs, then
// Cancel, and the state the API reports. Then the account's past batches,
// newest first, a page and the next, and one of them opened.
func TestConsoleCancelAndPastInBrowser(t *testing.T) {
	t.Parallel()
	s := startStack(t, func(o *server.Options) {
		// Test mode retries every second; 600 tries keep the batch
		// running for ten minutes, longer than the test may take.
		o.Worker = batch.Worker{Processor: &batch.Processor{MaxGreyAttempts: 600}}
	})
	// Eleven batches before the page opens: more than its page of ten.
	var older []string // newest first
	for i := range 11 {
		older = append([]string{s.batchDone(t, fmt.Sprintf("user%d@x.example", i))}, older...)
	}
	p := openPage(t, s)
	p.useKey(s.key)
	pastIDs := func() []string {
		return eval[[]string](p, `Array.from(document.querySelectorAll("#past tbody button")).map(function(b){ return b.dataset.id; })`)
	}
	p.waitFor("a page of past batches", `document.querySelectorAll("#past tbody tr").length === 10 && !document.getElementById("past-more").hidden`)
	if got := pastIDs(); fmt.Sprint(got) != fmt.Sprint(older[:10]) {
		t.Errorf("past batches %v, want the ten newest, newest first: %v", got, older[:10])
	}

	p.step("paste a list", setField("list-paste", "accepted_email@x.example\nrejected_email@x.example\ngreylisted@x.example"),
		setField("list-name", "Spring signups"),
		chromedp.Click(chromedp.CSS(`input[name=list-mode][value=full]`)), chromedp.Click(chromedp.ID("list-go")),
		chromedp.WaitVisible(chromedp.ID("batch")))
	p.waitFor("the estimate", `document.getElementById("batch-eta").textContent.includes(" left (")`)
	if got := p.text("batch-done"); !strings.Contains(got, "2 of 3 addresses verified (66%)") {
		t.Errorf("while running, progress says %q, want 2 of 3 (66%%)", got)
	}
	if got := p.text("batch-state"); got != "running" {
		t.Errorf("state %q, want running", got)
	}
	p.shoot("console-running")

	p.step("cancel", chromedp.Click(chromedp.ID("batch-cancel")))
	p.waitFor("the cancelled state", `document.getElementById("batch-state").textContent === "cancelled"`)
	p.waitFor("the partial breakdown", `document.getElementById("reasons-state").textContent.includes("by reason")`)
	id := p.text("batch-id")
	var env struct {
		Request struct{ State string } `json:"request"`
	}
	if err := json.Unmarshal(s.get(t, "/v1/requests/"+id, "application/json"), &env); err != nil || env.Request.State != "cancelled" {
		t.Errorf("the API says the batch is %q (%v), want cancelled", env.Request.State, err)
	}
	if got := eval[bool](p, `document.getElementById("batch-cancel").disabled`); !got {
		t.Error("Cancel batch still enabled on a cancelled batch")
	}
	if got := p.text("batch-eta"); got != "" {
		t.Errorf("a final batch still shows an estimate: %q", got)
	}
	if reasons := checkBreakdowns(t, p, s, id); reasons["greylisted"] != 0 || reasons["accepted_email"] != 1 {
		t.Errorf("cancelled batch's reasons %v: want the two verified, not the greylisted one", reasons)
	}
	p.shoot("console-cancelled")

	// The cancelled batch is the newest past batch, in its final state,
	// under the name it was given (the others have none); the next page
	// brings the oldest; the order is the API's.
	p.waitFor("the cancelled batch listed", fmt.Sprintf(`(function(){var r=document.querySelector("#past tbody tr");
		return r && r.cells[0].textContent === "Spring signups" && r.cells[2].textContent === "cancelled" &&
			r.nextElementSibling.cells[0].textContent === "—" && r.querySelector("button").dataset.id === %q;})()`, id))
	p.step("show older batches", chromedp.Click(chromedp.ID("past-more")))
	p.waitFor("every past batch", `document.querySelectorAll("#past tbody tr").length === 12 && document.getElementById("past-more").hidden`)
	want := append([]string{id}, older...)
	var list struct {
		Requests []struct {
			Request struct{ ID string } `json:"request"`
		} `json:"requests"`
	}
	if err := json.Unmarshal(s.get(t, "/v1/requests?limit=1000", "application/json"), &list); err != nil {
		t.Fatal(err)
	}
	var api []string
	for _, r := range list.Requests {
		api = append(api, r.Request.ID)
	}
	if got := pastIDs(); fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(api) != fmt.Sprint(want) {
		t.Errorf("past batches %v, the API's %v; want %v", got, api, want)
	}
	p.shoot("console-past")

	// Opening the oldest shows it as a list just verified: its state,
	// its breakdown and its one result; the focus moves to it.
	p.step("open the oldest", chromedp.Click(chromedp.CSS(fmt.Sprintf(`#past button[data-id=%q]`, older[10]))))
	p.waitFor("the oldest batch", fmt.Sprintf(`document.getElementById("batch-id").textContent === %q &&
		document.querySelectorAll("#results tbody tr").length === 1`, older[10]))
	p.waitFor("its reasons", `document.getElementById("reasons-state").textContent.includes("by reason")`)
	if got, row := p.text("batch-state"), eval[string](p, `document.querySelector("#results tbody tr").cells[0].textContent`); got != "completed" || row != "user0@x.example" {
		t.Errorf("opened batch: state %q, result %q; want completed, user0@x.example", got, row)
	}
	if got := eval[string](p, `document.activeElement.id`); got != "batch-title" {
		t.Errorf("after Open the focus is on %q, want the batch's title", got)
	}
	checkBreakdowns(t, p, s, older[10])
	p.done()
}

// TestMain stops the package's Chromium once the tests have run.
func TestMain(m *testing.M) {
	code := m.Run()
	stopChromium()
	os.Exit(code)
}
