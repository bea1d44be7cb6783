package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/evs-dev/evs/internal/evs"
)

// forgive401 drops the page problems that are the expected 401 replies to a
// refused key (and the browser's log lines about them).
func (p *page) forgive401() {
	p.log.mu.Lock()
	defer p.log.mu.Unlock()
	kept := p.log.problems[:0]
	for _, pr := range p.log.problems {
		if !strings.Contains(pr, "401") || !strings.Contains(pr, "/v1/verify") && !strings.Contains(pr, "/v1/requests") {
			kept = append(kept, pr)
		}
	}
	p.log.problems = kept
}

// verdictAfter submits address in the single box and waits for a verdict
// other than the one shown before (prev, the normalized address shown),
// with no error: a box that refuses the input, or keeps the last verdict,
// never gets there.
func (p *page) verdictAfter(address, prev string) {
	p.t.Helper()
	p.step("verify "+address, setField("verify-email", address), chromedp.Click(chromedp.ID("verify-go")))
	p.waitFor("the verdict of "+address, fmt.Sprintf(`(function(){
		var r = document.getElementById("verify-result"), s = document.getElementById("verify-status").textContent;
		return !r.hidden && document.getElementById("error").hidden && /^(deliverable|undeliverable|risky|unknown)$/.test(s) &&
			document.getElementById("verify-normalized").textContent !== %q;})()`, prev))
}

// TestConsoleFirstTryInBrowser covers what a new user met on the first
// try (issue 39): the single box takes what the API takes (an
// internationalised address, typos it has suggestions for) and shows
// only the last submission's verdict or error; the list's default mode is
// the single box's; a refused key is said to be refused and dropped.
func TestConsoleFirstTryInBrowser(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	p := openPage(t, s)

	// The same default mode for one address and for a list: the API's.
	if got := eval[string](p, `document.querySelector("input[name=list-mode]:checked").value + " " + document.getElementById("verify-mode").value`); got != "full full" {
		t.Errorf("default modes (list, single) = %q, want full full", got)
	}
	// The box is a text box the browser does not validate.
	if got := eval[string](p, `(function(e){return [e.type, e.inputMode, e.autocomplete, e.spellcheck].join(" ");})(document.getElementById("verify-email"))`); got != "text email off false" {
		t.Errorf("the address box is %q (type inputmode autocomplete spellcheck), want text email off false", got)
	}

	// A key the server refuses: the page says so, and that no key is in
	// use, and asks for one again.
	bad := "evs." + strings.Repeat("A", 43)
	p.step("use an unknown key", chromedp.SendKeys(chromedp.ID("key"), bad), chromedp.Click(chromedp.ID("key-use")))
	p.waitFor("the refusal", `document.getElementById("key-state").textContent.includes("refused")`)
	state := p.text("key-state")
	if !strings.Contains(state, "no key is in use") || strings.Contains(state, "A key is in use") || !strings.Contains(state, "…AAAA") {
		t.Errorf("after a 401 the key state says %q; want the key (…AAAA) refused and no key in use", state)
	}
	if got := eval[string](p, `(sessionStorage.getItem("evs.apiKey") || "") + "|" + document.getElementById("key").getAttribute("aria-invalid")`); got != "|true" {
		t.Errorf("after a 401, stored key|aria-invalid of the key box = %q, want no key and true", got)
	}
	p.shoot("console-key-refused")
	// Nothing is sent with the refused key afterwards.
	mark := len(p.log.sent(0))
	// (The refusal's own error is on screen already: wait for the next.)
	p.step("verify without a key", setField("verify-email", "someone@x.example"), chromedp.Click(chromedp.ID("verify-go")))
	p.waitFor("to be asked for a key", `document.getElementById("error").textContent.includes("Paste an API key first")`)
	for _, r := range p.log.sent(mark) {
		if p.log.withKey(r) {
			t.Errorf("%s sent with the refused key", r)
		}
	}
	p.forgive401()

	p.useKey(s.key)
	if got := eval[string](p, `String(document.getElementById("key").getAttribute("aria-invalid"))`); got != "null" && got != "false" {
		t.Errorf("a good key leaves the key box aria-invalid=%s", got)
	}

	// A typo, with its suggestion shown.
	p.verdictAfter("bob@gmial.com", "")
	if got := p.text("verify-suggestion"); got != "bob@gmail.com" {
		t.Errorf("bob@gmial.com: suggestion %q, want bob@gmail.com", got)
	}
	// An internationalised address: a verdict of its own, replacing the
	// typo's, suggestion included.
	p.verdictAfter("josé@exämple.com", p.text("verify-normalized"))
	if got := p.text("verify-normalized"); strings.Contains(got, "gmial") {
		t.Errorf("josé@exämple.com: the address shown is %q", got)
	}
	if got := p.text("verify-suggestion"); got == "bob@gmail.com" {
		t.Error("josé@exämple.com: the typo's suggestion is still shown")
	}
	// Two @: the API's verdict (invalid syntax), not the browser's.
	p.verdictAfter("bob@@x.com", p.text("verify-normalized"))
	if got := p.text("verify-reason"); !strings.HasPrefix(got, string(evs.ReasonInvalidSyntax)) {
		t.Errorf("bob@@x.com: reason %q, want %s", got, evs.ReasonInvalidSyntax)
	}

	// A failed submission shows its error and no verdict: not the last one.
	p.step("forget the key and verify", chromedp.Click(chromedp.ID("key-forget")), setField("verify-email", "bob@gmial.com"),
		chromedp.Click(chromedp.ID("verify-go")), chromedp.WaitVisible(chromedp.ID("error")))
	if got := eval[bool](p, `document.getElementById("verify-result").hidden`); !got {
		t.Errorf("a failed verification (%q) leaves the last verdict on screen", p.text("error"))
	}
	p.done()
}
