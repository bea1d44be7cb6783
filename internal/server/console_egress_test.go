package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/testkit"
)

// egressCard is one egress card of the console's panel, as the page shows
// it.
type egressCard struct {
	Name, State, Listed, HELO, Text string
	// Shares are the blocked share rows: provider → share.
	Shares map[string]string
}

// checkEgressInBrowser opens the console at address at in a headless Chromium
// (the one `make chromium` installs; the test fails without it) and
// presses "Check the egress".
func checkEgressInBrowser(t *testing.T, at string) context.Context {
	t.Helper()
	exe := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			exe = p
			break
		}
	}
	if exe == "" {
		t.Fatal("no chromium on PATH: run `make chromium` (Debian: apt-get install chromium)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(bctx,
		chromedp.Navigate(at),
		chromedp.WaitVisible(chromedp.ID("egress-load")),
		chromedp.Click(chromedp.ID("egress-load")),
	); err != nil {
		t.Fatalf("open the console at %s and check the egress: %v", at, err)
	}
	return bctx
}

// TestConsoleEgressPanel: in a real browser, the console's "Are we
// blocked?" panel shows each of two SOCKS exits of evs serve: exit A's
// address listed in the test blocklist zone and its provider's probes
// refused (share 100%, avoided), exit B clean with its HELO name
// confirmed; read from /readyz, without the key.
func TestConsoleEgressPanel(t *testing.T) {
	t.Parallel()
	dns := testkit.StartDNS(t)
	for _, rr := range []string{
		"probe.evs.test. 300 IN A " + exitA, "probe.evs.test. 300 IN A " + exitB,
		"41.0.0.127.in-addr.arpa. 300 IN PTR probe.evs.test.", "42.0.0.127.in-addr.arpa. 300 IN PTR probe.evs.test.",
	} {
		dns.AddRecord(rr)
	}
	e := startExits(t, options{
		rcptFrom: func(client, addr string) string {
			if client == exitA {
				return "554 5.7.1 Service unavailable; Client host [" + client + "] blocked using bl.test"
			}
			return "250 2.1.5 OK"
		},
		server: func(o *server.Options) {
			o.Config.DNSServers = []string{dns.Addr}
			o.Config.Blocklists = []string{"bl.test"}
			o.Config.HELO = "probe.evs.test"
			o.SelfCheckEvery = 100 * time.Millisecond
		},
	})
	for i := 0; i < 5; i++ {
		if st, reason, from := e.verify("alice@" + e.on[0]); st != 200 || reason != "blocked" || from != exitA {
			t.Fatalf("verification %d: %d %s from %q, want blocked from %s", i+1, st, reason, from, exitA)
		}
	}
	// Exit A's address listed: a listed exit is avoided for every
	// provider from the next self-check on.
	dns.AddRecord("41.0.0.127.bl.test. 300 IN A 127.0.0.2")
	waitFor(t, "exit A listed in /readyz", func() bool {
		ex := e.exits()
		return len(ex[0].Blocklists) == 1 && ex[0].Blocklists[0].Listed
	})

	bctx := checkEgressInBrowser(t, e.base+"/console/")
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`document.querySelectorAll("#egress article.egress").length === 2`,
		chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		t.Fatalf("the panel's two cards: %v", err)
	}
	cards, err := chromedp.Run(bctx,
		chromedp.Evaluate[[]egressCard](`Array.from(document.querySelectorAll("#egress article.egress")).map(function (a) {
			var q = function (s, attr) { var n = a.querySelector(s); return n ? n.getAttribute(attr) : "absent"; };
			var shares = {};
			a.querySelectorAll("tr[data-provider]").forEach(function (r) { shares[r.getAttribute("data-provider")] = r.getAttribute("data-share"); });
			return {Name: a.getAttribute("data-egress"), State: q("[data-state]", "data-state"), Listed: q("[data-listed]", "data-listed"),
				HELO: q("[data-helo]", "data-helo"), Text: a.innerText, Shares: shares};
		})`))
	if err != nil {
		t.Fatalf("the console's egress panel: %v", err)
	}
	want := []struct {
		name, listed, share string
		bad                 bool
	}{
		{e.names[0], "bl.test", "1", true},
		{e.names[1], "", "", false},
	}
	if len(cards) != len(want) {
		t.Fatalf("cards %+v", cards)
	}
	for i, w := range want {
		c := cards[i]
		if c.Name != w.name || c.State != "in rotation" || c.Listed != w.listed || c.HELO != "ok" {
			t.Errorf("card %d: %+v, want %s in rotation, listed on %q, HELO ok", i, c, w.name, w.listed)
		}
		if c.Shares["other"] != w.share {
			t.Errorf("card %d: blocked shares %v, want other=%q", i, c.Shares, w.share)
		}
		if bad := strings.Contains(c.Text, "LISTED"); bad != w.bad {
			t.Errorf("card %d says LISTED: %v, want %v:\n%s", i, bad, w.bad, c.Text)
		}
	}
	for i, want := range []string{"every provider while another exit is not listed, and for other", "no provider"} {
		if !strings.Contains(cards[i].Text, "Avoided for\n"+want) && !strings.Contains(cards[i].Text, "Avoided for\t"+want) {
			t.Errorf("card %d does not say it is avoided for %q:\n%s", i, want, cards[i].Text)
		}
	}
	if dir := os.Getenv("EVS_SCREENSHOTS"); dir != "" {
		// To look at the panel: a full-page shot at a desktop's width.
		if png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100)); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "console-egress-1280.png"), png, 0o644)
		}
	}
	state, err := chromedp.Run(bctx, chromedp.Text(chromedp.ID("egress-state")))
	if err != nil || !strings.Contains(state, "1 listed on a blocklist") {
		t.Errorf("panel state %q (%v), want it to say one egress is listed", state, err)
	}
}

// TestConsoleEgressPanelWithoutReadyz: where nothing answers /readyz (the
// AWS stack, here a front that serves everything else of evs serve and
// refuses /readyz as API Gateway refuses a route it does not have), the
// panel says so and where to look instead, and shows no card.
func TestConsoleEgressPanelWithoutReadyz(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	target, err := url.Parse(h.base)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == server.ReadyPath {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"message":"Missing Authentication Token"}`))
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	bctx := checkEgressInBrowser(t, front.URL+"/console/")
	if _, err := chromedp.Run(bctx, chromedp.Poll[bool](`document.getElementById("egress-state").textContent.includes("does not serve /readyz")`,
		chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		t.Fatalf("the panel's words without /readyz: %v", err)
	}
	state, err := chromedp.Run(bctx, chromedp.Text(chromedp.ID("egress-state")))
	if err != nil || !strings.Contains(state, "EgressListedAlarm") {
		t.Errorf("panel state %q (%v), want it to name the alarms", state, err)
	}
	if n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("#egress article").length`)); err != nil || n != 0 {
		t.Errorf("%d cards (%v), want none", n, err)
	}
}
