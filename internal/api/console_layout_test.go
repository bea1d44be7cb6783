package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/evs-dev/evs/internal/evs"
)

// tableLayout is, for every table on the page, what is wrong with it at
// the viewport's width: a cell whose content overflows it (clipped), a
// word (an address, a reason, a flag, a header) laid out on two lines, a
// header cell not reachable in its scroll container, or an element other
// than a table's own container that scrolls sideways. Empty when all is
// well.
const tableLayout = `(function(){
	var bad = [];
	function scrolls(e) { return e.scrollWidth > e.clientWidth + 1; }
	document.querySelectorAll("table").forEach(function(t){
		if (!t.offsetParent) { return; } // not shown
		var name = t.id || (t.caption ? t.caption.textContent : "a table");
		// Cards (the results on a phone): the header is for screen
		// readers, and a cell may wrap anywhere (a long address); what
		// must hold is checked by the test.
		var cards = t.tHead && getComputedStyle(t.tHead).position === "absolute";
		var wrap = t.closest(".table-wrap");
		for (var e = t.parentElement; e && e !== document.body; e = e.parentElement) {
			if (e !== wrap && scrolls(e)) { bad.push(name + ": <" + e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + "> scrolls sideways"); }
		}
		if (wrap && scrolls(wrap) && !/^(auto|scroll)$/.test(getComputedStyle(wrap).overflowX)) {
			bad.push(name + ": its container is cut, not scrolled");
		}
		var box = (wrap || t.parentElement).getBoundingClientRect(), left = wrap ? wrap.scrollLeft : 0;
		var width = wrap ? wrap.scrollWidth : box.width;
		t.querySelectorAll("th, td").forEach(function(c){
			var r = c.getBoundingClientRect();
			if (c.scrollWidth > c.clientWidth + 1) { bad.push(name + ": cell " + JSON.stringify(c.textContent) + " clipped"); }
			if (cards && (c.tagName === "TH" || getComputedStyle(c).overflowWrap === "anywhere")) { return; }
			if (c.tagName === "TH" && (r.left - box.left + left < -1 || r.right - box.left + left > width + 1)) {
				bad.push(name + ": header " + JSON.stringify(c.textContent) + " out of reach (" + Math.round(r.left - box.left) + "–" + Math.round(r.right - box.left) + " of " + Math.round(width) + ")");
			}
			var w = document.createTreeWalker(c, NodeFilter.SHOW_TEXT), n;
			while ((n = w.nextNode())) {
				var re = /\S+/g, m;
				while ((m = re.exec(n.data))) {
					var g = document.createRange();
					g.setStart(n, m.index); g.setEnd(n, m.index + m[0].length);
					var tops = {};
					Array.from(g.getClientRects()).forEach(function(x){ if (x.width > 0) { tops[Math.round(x.top)] = true; } });
					if (Object.keys(tops).length > 1) { bad.push(name + ": " + JSON.stringify(m[0]) + " split over lines"); }
				}
			}
		});
	});
	if (document.documentElement.scrollWidth > window.innerWidth) {
		bad.push("the page is " + document.documentElement.scrollWidth + " px wide in " + window.innerWidth);
	}
	return bad;
})()`

// TestConsoleTablesFitInBrowser loads a batch's results (every test-mode
// outcome, so every flag, and a typo with its suggestion) and the past
// batches, and checks every table at a phone's and a desktop's width:
// nothing clipped, no word split, every header reachable, and the page
// itself never wider than the screen; on the desktop the results fit
// unscrolled.
func TestConsoleTablesFitInBrowser(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	p := openPage(t, s)
	p.useKey(s.key)
	var list []string
	for _, r := range evs.Reasons() {
		list = append(list, fmt.Sprintf("team+%s@x.example", r))
	}
	list = append(list, "first.last-name@gmial.com", "someone.with.a.rather.long.name@subdomain.example")
	p.step("paste a list", setField("list-paste", strings.Join(list, "\n")), chromedp.Click(chromedp.ID("list-go")),
		chromedp.WaitVisible(chromedp.ID("batch")))
	p.finished("the list")
	p.waitFor("the results", fmt.Sprintf(`document.querySelectorAll("#results tbody tr").length === %d`, len(list)))
	p.waitFor("the past batch", `document.querySelectorAll("#past tbody tr").length === 1`)
	if got := eval[string](p, `Array.from(document.querySelectorAll("#results tbody tr")).map(function(r){ return r.cells[4].textContent + "|" + r.cells[5].textContent; }).join(" ")`); !strings.Contains(got, "disposable") || !strings.Contains(got, "first.last-name@gmail.com") {
		t.Fatalf("the results show flags|suggestions %q: want a disposable flag and a suggestion to check their columns", got)
	}
	for _, w := range widths {
		p.step(fmt.Sprintf("resize to %d", w), chromedp.EmulateViewport(w, 800))
		if bad := eval[[]string](p, tableLayout); len(bad) != 0 {
			t.Errorf("at %d px:\n%s", w, strings.Join(bad, "\n"))
		}
		// On a desktop's screen the results need no scrolling at all.
		if w >= 1280 {
			if got := eval[string](p, `(function(x){ return x.scrollWidth > x.clientWidth ? x.scrollWidth + " px in " + x.clientWidth : ""; })(document.getElementById("results").closest(".table-wrap"))`); got != "" {
				t.Errorf("at %d px the results scroll sideways: %s", w, got)
			}
		}
		// On a phone the results are cards: each row's status and reason
		// in view, nothing to scroll sideways.
		if w < 480 {
			p.shoot(fmt.Sprintf("console-tables-%d", w))
			if got := eval[string](p, `(function(){
				var out = [], wrap = document.getElementById("results").closest(".table-wrap");
				if (wrap.scrollWidth > wrap.clientWidth + 1) { out.push("the results scroll sideways"); }
				Array.from(document.querySelectorAll("#results tbody tr")).forEach(function(tr){
					[1, 2].forEach(function(i){
						var r = tr.cells[i].getBoundingClientRect();
						if (r.width === 0 || r.left < 0 || r.right > window.innerWidth) { out.push(tr.cells[0].textContent + ": " + tr.cells[i].textContent + " not in view"); }
					});
				});
				return out.join("\n");})()`); got != "" {
				t.Errorf("at %d px:\n%s", w, got)
			}
			continue
		}
		// Each column of the results can be brought into view by
		// scrolling its container, the page itself staying put.
		if got := eval[string](p, `(function(){
			var wrap = document.getElementById("results").closest(".table-wrap"), out = [];
			Array.from(document.querySelectorAll("#results th")).forEach(function(th){
				th.scrollIntoView({block: "nearest", inline: "nearest"});
				var r = th.getBoundingClientRect(), b = wrap.getBoundingClientRect();
				// Whole in view, or filling the box when wider than it
				// (a long address).
				var seen = Math.min(r.right, b.right) - Math.max(r.left, b.left);
				if (seen < Math.min(r.width, b.width) - 1 || window.scrollX !== 0) { out.push(th.textContent); }
			});
			wrap.scrollLeft = 0;
			return out.join(", ");})()`); got != "" {
			t.Errorf("at %d px, headers not brought into view by scrolling the table: %s", w, got)
		}
	}
	p.shoot("console-tables")
	p.done()
}
