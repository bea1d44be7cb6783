package console_test

import (
	"context"
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

	"github.com/evs-dev/evs/internal/console"
)

// browserTimeout bounds the whole browser test, so that CI never hangs on
// a browser that does not answer.
const browserTimeout = 60 * time.Second

// stepTimeout bounds one step (a greylisted address's retries are the
// slowest, seconds in test mode).
const stepTimeout = 20 * time.Second

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

// problems gathers what the page must never do: console errors, uncaught
// exceptions, CSP violations (logged as errors), failed loads and HTTP
// error replies.
type problems struct {
	mu   sync.Mutex
	list []string
}

func (p *problems) add(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = append(p.list, fmt.Sprintf(format, args...))
}

func (p *problems) listen(ev any) {
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
		p.add("load failed: %s %s", e.ErrorText, e.BlockedReason)
	case *network.EventResponseReceived:
		if e.Response.Status >= 400 {
			p.add("HTTP %d for %s", e.Response.Status, e.Response.URL)
		}
	}
}

// TestConsoleInBrowser drives the console in a real headless Chromium
// against a real server: key, one verification and its suggestion, a CSV
// list through to 100%, the breakdown, the filter, a download, and the
// page at a phone's and a desktop's width.
func TestConsoleInBrowser(t *testing.T) {
	exe := chromiumPath(t)
	s := startStack(t)
	shots := screenshotDir(t)
	downloads := t.TempDir()
	csvPath := filepath.Join(t.TempDir(), "list.csv")
	list := "email\naccepted_email@x.example\nteam+rejected_email@x.example\nmailbox_full@x.example\ngreylisted@x.example\naccepted_email@X.Example\n"
	if err := os.WriteFile(csvPath, []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.Headless,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()

	var bad problems
	if err := chromedp.Listen(bctx, bad.listen); err != nil {
		t.Fatalf("start chromium (%s): %v", exe, err)
	}
	if _, err := chromedp.Call(bctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(bctx, log.Enable, struct{}{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.CallBrowser(bctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: downloads}); err != nil {
		t.Fatal(err)
	}

	// Each step has its share of the time, so that a stuck one leaves
	// time to say what the page showed.
	stuck := func(what string, err error) {
		t.Helper()
		page, perr := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.innerText`))
		if perr != nil {
			page = perr.Error()
		}
		bad.mu.Lock()
		defer bad.mu.Unlock()
		t.Fatalf("%s: %v\npage problems so far: %v\npage:\n%s", what, err, bad.list, page)
	}
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, stepTimeout)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			stuck(what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Text(chromedp.ID(sel)))
		if err != nil {
			t.Fatalf("text of #%s: %v", sel, err)
		}
		return strings.TrimSpace(v)
	}
	waitFor := func(what, js string) {
		t.Helper()
		sctx, cancel := context.WithTimeout(bctx, stepTimeout)
		defer cancel()
		if _, err := chromedp.Run(sctx, chromedp.Poll[bool](js, chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
			stuck("waiting for "+what, err)
		}
	}

	// setField sets a field's value as a user's choice does, change
	// event included.
	setField := func(id, v string) chromedp.Action[chromedp.Void] {
		return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(function(f){f.value=%q;f.dispatchEvent(new Event("change"));})(document.getElementById(%q))`, v, id))
	}
	step("open the console", chromedp.Navigate(s.base+console.Path), chromedp.WaitVisible(chromedp.ID("key")))
	// Every control has a name a screen reader reads, and can be reached
	// by the keyboard (no negative tabindex).
	unnamed, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("input, select, textarea, button"))
		.filter(function(c){ return c.tabIndex < 0 || !((c.labels && c.labels.length) || c.getAttribute("aria-label") || (c.tagName === "BUTTON" && c.textContent.trim())); })
		.map(function(c){ return c.id || c.name || c.tagName; })`))
	if err != nil || len(unnamed) != 0 {
		t.Errorf("controls without a label or out of the tab order: %v (%v)", unnamed, err)
	}

	// A key the server does not know: the API's refusal in words, with
	// its request id. The two reports of the expected 401 (the reply, and
	// the browser's log line about it) are not page problems.
	step("enter an unknown key", chromedp.SendKeys(chromedp.ID("key"), "evs."+strings.Repeat("A", 43)), chromedp.Click(chromedp.ID("key-use")),
		chromedp.SendKeys(chromedp.ID("verify-email"), "accepted_email@x.example"), chromedp.Click(chromedp.ID("verify-go")),
		chromedp.WaitVisible(chromedp.ID("error")))
	msg := text("error")
	if !regexp.MustCompile(`unauthorized, HTTP 401, request id [0-9a-f-]{36}`).MatchString(msg) {
		t.Errorf("error shown as %q; want the code, the HTTP status and the request id", msg)
	}
	bad.mu.Lock()
	kept := bad.list[:0]
	for _, p := range bad.list {
		if !strings.Contains(p, "401") || !strings.Contains(p, "/v1/verify") {
			kept = append(kept, p)
		}
	}
	bad.list = kept
	bad.mu.Unlock()
	step("forget it", chromedp.Click(chromedp.ID("key-forget")), setField("verify-email", ""))

	step("enter the key", chromedp.SendKeys(chromedp.ID("key"), s.key), chromedp.Click(chromedp.ID("key-use")))
	waitFor("the key in use", `document.getElementById("key-state").textContent.includes("in use")`)
	if v, err := chromedp.Run(bctx, chromedp.Value(chromedp.ID("key"))); err != nil || v != "" {
		t.Errorf("the key field still holds %d characters (%v): the key should leave it once stored", len(v), err)
	}

	step("verify one address", chromedp.SendKeys(chromedp.ID("verify-email"), "team+rejected_email@x.example"),
		chromedp.Click(chromedp.ID("verify-go")))
	waitFor("the verdict", `!document.getElementById("verify-result").hidden && document.getElementById("verify-status").textContent !== ""`)
	if got, reason := text("verify-status"), text("verify-reason"); got != "undeliverable" || !strings.HasPrefix(reason, "rejected_email") {
		t.Errorf("verdict %q, reason %q; want undeliverable, rejected_email", got, reason)
	}
	if ev := text("verify-evidence"); !strings.Contains(ev, "smtp") {
		t.Errorf("evidence %q does not show the SMTP check", ev)
	}

	// A typo of a well-known domain: the suggestion is a button that
	// verifies the corrected address.
	step("verify a typo", setField("verify-email", ""), chromedp.SendKeys(chromedp.ID("verify-email"), "someone@gmial.com"),
		chromedp.Click(chromedp.ID("verify-go")), chromedp.WaitVisible(chromedp.ID("verify-suggestion-use")))
	if got := text("verify-suggestion-use"); got != "someone@gmail.com" {
		t.Errorf("suggestion %q, want someone@gmail.com", got)
	}
	step("follow the suggestion", chromedp.Click(chromedp.ID("verify-suggestion-use")))
	waitFor("the suggestion's verdict", `document.getElementById("verify-normalized").textContent === "someone@gmail.com"`)

	step("upload a list", chromedp.SetUploadFiles(chromedp.ID("list-file"), []string{csvPath}),
		chromedp.Click(chromedp.CSS(`input[name=list-mode][value=full]`)), chromedp.Click(chromedp.ID("list-go")),
		chromedp.WaitVisible(chromedp.ID("batch")))
	waitFor("the bar at 100%", `(function(){var p=document.getElementById("batch-progress");
		return !document.getElementById("batch-final").hidden && p.value === p.max;})()`)
	if got := text("batch-done"); !strings.Contains(got, "4 of 4") || !strings.Contains(got, "(100%)") {
		t.Errorf("progress says %q, want 4 of 4 (100%%)", got)
	}
	if got := text("count-duplicates"); got != "1" {
		t.Errorf("duplicates %q, want 1", got)
	}
	breakdown, err := chromedp.Run(bctx, chromedp.Evaluate[map[string]string](`Object.fromEntries(Array.from(
		document.querySelectorAll("#breakdown svg g")).map(function(g){return [g.dataset.status, g.dataset.count];}))`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"deliverable": "1", "undeliverable": "1", "risky": "1", "unknown": "1"}
	if fmt.Sprint(breakdown) != fmt.Sprint(want) {
		t.Errorf("breakdown %v, want %v", breakdown, want)
	}
	waitFor("the results table", `document.querySelectorAll("#results tbody tr").length === 4`)
	step("filter deliverable", setField("results-filter", "deliverable"))
	waitFor("the filtered table", `(function(){var r=document.querySelectorAll("#results tbody tr");
		return r.length === 1 && r[0].cells[1].textContent === "deliverable";})()`)

	step("download the deliverable", chromedp.Click(chromedp.ID("download-deliverable")))
	csv := waitDownload(ctx, t, downloads)
	lines := strings.Split(strings.TrimSpace(csv), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "email,status") || !strings.HasPrefix(lines[1], "accepted_email@x.example,deliverable") {
		t.Errorf("deliverable download:\n%s\nwant the header and the one deliverable row", csv)
	}

	// A pasted list, in quick mode: no SMTP, so a plain address is not
	// checked, and a named outcome keeps its reason.
	step("paste a list", setField("list-file", ""), setField("list-paste", "someone@x.example,\n  mailbox_full@x.example\n"),
		chromedp.Click(chromedp.CSS(`input[name=list-mode][value=quick]`)), chromedp.Click(chromedp.ID("list-go")))
	waitFor("the pasted list done", `(function(){var p=document.getElementById("batch-progress");
		return !document.getElementById("batch-final").hidden && p.value === p.max && document.getElementById("count-total").textContent === "2";})()`)
	if got := text("batch-done"); !strings.Contains(got, "2 of 2") {
		t.Errorf("pasted list: progress says %q, want 2 of 2", got)
	}
	if u, r := text("count-unknown"), text("count-risky"); u != "1" || r != "1" {
		t.Errorf("pasted list in quick mode: unknown %s, risky %s; want 1 and 1", u, r)
	}
	// A new list shows all its rows, whatever the last list's filter was.
	waitFor("the pasted list's table", `document.querySelectorAll("#results tbody tr").length === 2`)

	for _, w := range []int64{1280, 375} {
		step(fmt.Sprintf("resize to %d", w), chromedp.EmulateViewport(w, 800))
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)) // quality 100: PNG
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(shots, fmt.Sprintf("console-%d.png", w))
		if err := os.WriteFile(name, png, 0o644); err != nil {
			t.Fatal(err)
		}
		// Nothing wider than the screen: no sideways scrolling on a phone.
		if sw, err := chromedp.Run(bctx, chromedp.Evaluate[int64](`document.documentElement.scrollWidth`)); err != nil || sw > w {
			t.Errorf("at %d px the page is %d px wide (%v)", w, sw, err)
		}
	}
	t.Logf("screenshots in %s", shots)

	bad.mu.Lock()
	defer bad.mu.Unlock()
	for _, p := range bad.list {
		t.Errorf("page problem: %s", p)
	}
}

// waitDownload waits for the one finished file in dir and returns it.
func waitDownload(ctx context.Context, t *testing.T, dir string) string {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ents, _ := os.ReadDir(dir)
		if len(ents) == 1 && !strings.HasSuffix(ents[0].Name(), ".crdownload") {
			b, err := os.ReadFile(filepath.Join(dir, ents[0].Name()))
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no finished download in %s: %v", dir, ctx.Err())
		case <-tick.C:
		}
	}
}
