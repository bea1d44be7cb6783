package server_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/cache"
)

// probeCounter answers RCPTs for domains d000.example… of which the even
// ones accept any address and the odd ones reject unknown ones, and counts
// the accept-all probes (the engine's random "evs-…" address) by domain.
type probeCounter struct {
	mu     sync.Mutex
	probes map[string]int
}

func (p *probeCounter) rcpt(addr string) string {
	local, domain, _ := strings.Cut(strings.Trim(addr, "<>"), "@")
	if !strings.HasPrefix(local, "evs-") {
		return "250 2.1.5 OK"
	}
	p.mu.Lock()
	p.probes[domain]++
	p.mu.Unlock()
	if acceptsAll(domain) {
		return "250 2.1.5 OK"
	}
	return "550 5.1.1 <" + addr + ">: User unknown"
}

func (p *probeCounter) counts() (total, most int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.probes {
		total += n
		most = max(most, n)
	}
	return total, most
}

// acceptsAll tells whether dNNN.example accepts any address: the even ones.
func acceptsAll(domain string) bool {
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(domain, "d"), ".example"))
	return err == nil && n%2 == 0
}

// startFacts starts a server whose engine shares one cache.Facts
// across requests and batches, with domains d000.example to d<n-1>.example
// on the loopback SMTP peer.
func startFacts(t *testing.T, domains int) (*harness, *probeCounter, map[string]int) {
	t.Helper()
	pc := &probeCounter{probes: map[string]int{}}
	var mu sync.Mutex
	looked := map[string]int{}
	facts := cache.NewFacts(cache.FactsConfig{Count: func(r string) {
		mu.Lock()
		looked[r]++
		mu.Unlock()
	}})
	h := start(t, options{rcpt: pc.rcpt, realClock: true, facts: facts})
	for i := range domains {
		h.dns.AddRecord(fmt.Sprintf("d%03d.example. 300 IN MX 10 mx1.good.example.", i))
	}
	return h, pc, looked
}

// TestDomainFactsAcrossBatches (issue 22): two 10,000-address full
// batches over the same 500 domains, with different addresses, make at
// most one accept-all probe per domain between them, and the second
// batch's verdicts carry what the first one's probes learned.
func TestDomainFactsAcrossBatches(t *testing.T) {
	t.Parallel() // long, on a harness of its own: it runs beside the others so marked
	const domains, perDomain = 500, 20
	h, pc, looked := startFacts(t, domains)
	batchOf := func(tag string) []string {
		emails := make([]string, 0, domains*perDomain)
		for i := range perDomain {
			for d := range domains {
				emails = append(emails, fmt.Sprintf("%s%d@d%03d.example", tag, i, d))
			}
		}
		return emails
	}
	check := func(results map[string]map[string]any, want int) {
		t.Helper()
		if len(results) != want {
			t.Fatalf("%d results, want %d", len(results), want)
		}
		for email, d := range results {
			flags, _ := d["flags"].(map[string]any)
			_, domain, _ := strings.Cut(email, "@")
			if all := flags["acceptAll"] == true; all != acceptsAll(domain) {
				t.Fatalf("%s: acceptAll %v, want %v: %v", email, all, acceptsAll(domain), d)
			}
		}
	}
	check(h.fullBatch(h.liveKey, batchOf("first"), "", 5*time.Minute), domains*perDomain)
	first, _ := pc.counts()
	check(h.fullBatch(h.liveKey, batchOf("second"), "", 5*time.Minute), domains*perDomain)
	total, most := pc.counts()
	if first == 0 || total > domains || most > 1 {
		t.Fatalf("accept-all probes: %d in the first batch, %d in both, at most %d for one domain; want some, at most %d, at most 1",
			first, total, most, domains)
	}
	if total != first {
		t.Fatalf("the second batch probed %d domains the first one had answered for", total-first)
	}
	if looked["hit"] < domains {
		t.Fatalf("domain facts counted %v, want a hit per domain of the second batch", looked)
	}
}

// TestDomainFactsAcrossCalls: two /v1/verify calls for two addresses of
// one domain make one accept-all probe; the second call's evidence still
// says what the probe found.
func TestDomainFactsAcrossCalls(t *testing.T) {
	h, pc, _ := startFacts(t, 2)
	for _, tc := range []struct {
		domain, catchAll string
		acceptAll        bool
	}{
		{"d000.example", "accepted", true},
		{"d001.example", "rejected", false},
	} {
		for _, local := range []string{"ann", "bob"} {
			d := decisionOf(t, h.verifyAddr(h.liveKey, local+"@"+tc.domain, ""))
			smtp := d["checks"].(map[string]any)["smtp"].(map[string]any)
			flags := d["flags"].(map[string]any)
			if smtp["catchAll"] != tc.catchAll || flags["acceptAll"] != tc.acceptAll {
				t.Fatalf("%s@%s: catchAll %v acceptAll %v, want %s %v", local, tc.domain, smtp["catchAll"], flags["acceptAll"], tc.catchAll, tc.acceptAll)
			}
			// The second address's answer is the first one's probe, and
			// its evidence says so.
			detail, _ := smtp["detail"].(string)
			if remembered := strings.Contains(detail, "remembered from an earlier session"); remembered != (local == "bob") {
				t.Errorf("%s@%s: detail %q; want it to say the answer is remembered only for the second address", local, tc.domain, detail)
			}
		}
	}
	if total, most := pc.counts(); total != 2 || most != 1 {
		t.Fatalf("%d accept-all probes, at most %d for one domain; want one per domain", total, most)
	}
}

// timedGreylist defers each address until delay has passed since it was
// first asked about, as a greylisting server does, and counts the RCPTs
// per address; the accept-all probe is rejected.
type timedGreylist struct {
	delay time.Duration
	mu    sync.Mutex
	first map[string]time.Time
	calls map[string]int
}

func (g *timedGreylist) rcpt(addr string) string {
	addr = strings.ToLower(strings.Trim(addr, "<>"))
	if strings.HasPrefix(addr, "evs-") {
		return "550 5.1.1 <" + addr + ">: User unknown"
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls[addr]++
	first, seen := g.first[addr]
	if !seen {
		g.first[addr] = time.Now()
	}
	if !seen || time.Since(first) < g.delay {
		return greylistReply
	}
	return "250 2.1.5 OK"
}

// TestGreyDelayLearned: a batch learns how long a domain's server defers
// a new address before letting it through; the next batch's first retry
// there waits that long, so no session is spent on a retry the server
// would defer again. The server defers for 1 s and the back-off is
// 400 ms, then 800 ms: the first batch asks each address three times
// (0, 0.4 s, 1.2 s; twice when a loaded machine is late with the first
// retry), the second exactly twice (0, then after the learned delay).
func TestGreyDelayLearned(t *testing.T) {
	g := &timedGreylist{delay: time.Second, first: map[string]time.Time{}, calls: map[string]int{}}
	h := start(t, options{rcpt: g.rcpt, realClock: true,
		worker: batch.Worker{GreyBackoff: 400 * time.Millisecond, Processor: &batch.Processor{MaxGreyAttempts: 3}}})
	for _, tc := range []struct {
		tag                string
		minRCPTs, maxRCPTs int
	}{{"first", 2, 3}, {"second", 2, 2}} {
		var emails []string
		for i := range 10 {
			emails = append(emails, fmt.Sprintf("%s%d@good.example", tc.tag, i))
		}
		for email, d := range h.fullBatch(h.liveKey, emails, "", time.Minute) {
			g.mu.Lock()
			n := g.calls[email]
			g.mu.Unlock()
			if d["reason"] != "accepted_email" || n < tc.minRCPTs || n > tc.maxRCPTs {
				t.Fatalf("%s batch: %s %v after %d RCPTs, want accepted_email after %d to %d", tc.tag, email, d["reason"], n, tc.minRCPTs, tc.maxRCPTs)
			}
		}
	}
}
