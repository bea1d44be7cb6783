package server_test

import (
	"encoding/json"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/testkit"
)

// egressBody is /readyz's egress object, as a client reads it.
type egressBody struct {
	Name       string  `json:"name"`
	CheckedAt  *string `json:"checkedAt"`
	Address    string  `json:"address"`
	Blocklists []struct {
		Zone   string   `json:"zone"`
		Listed bool     `json:"listed"`
		Codes  []string `json:"codes"`
	} `json:"blocklists"`
	HELO *struct {
		Name string `json:"name"`
		OK   bool   `json:"ok"`
	} `json:"helo"`
	Blocked []struct {
		Provider string  `json:"provider"`
		Answered int     `json:"answered"`
		Blocked  int     `json:"blocked"`
		Share    float64 `json:"share"`
	} `json:"blocked"`
}

func (h *harness) egress() egressBody {
	h.t.Helper()
	r := h.do(req{path: server.ReadyPath})
	var b struct {
		Status string     `json:"status"`
		Egress egressBody `json:"egress"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil || r.status != 200 || b.Status != "ok" {
		h.t.Fatalf("/readyz: %d %s (%v)", r.status, r.body, err)
	}
	return b.Egress
}

// metricLine returns the value of the exposition line that starts with
// name{labels}, or "absent".
func metricLine(prom *server.Prometheus, series string) string {
	rec := httptest.NewRecorder()
	prom.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return "absent"
}

// TestEgressSelfCheck: the egress address is looked up in the configured
// DNS blocklists and the HELO name checked against it at start and every
// interval; a listing that appears is in /readyz's body and the metrics
// within one interval, while /readyz stays 200 (the API still serves).
func TestEgressSelfCheck(t *testing.T) {
	dns := testkit.StartDNS(t)
	dns.AddRecord("probe.evs.test. 300 IN A 127.0.0.1")
	dns.AddRecord("1.0.0.127.in-addr.arpa. 300 IN PTR probe.evs.test.")
	prom := server.NewPrometheus(nil)
	h := start(t, options{server: func(o *server.Options) {
		o.Config.DNSServers = []string{dns.Addr}
		o.Config.EgressIP = netip.MustParseAddr("127.0.0.1")
		o.Config.Blocklists = []string{"bl.test"}
		o.Config.HELO = "probe.evs.test"
		o.SelfCheckEvery = 100 * time.Millisecond
		o.Metrics = prom
	}})
	waitFor(t, "the first self-check", func() bool { return h.egress().CheckedAt != nil })
	e := h.egress()
	if e.Name != "direct" || e.Address != "127.0.0.1" || len(e.Blocklists) != 1 || e.Blocklists[0].Zone != "bl.test" || e.Blocklists[0].Listed ||
		e.HELO == nil || !e.HELO.OK || e.HELO.Name != "probe.evs.test" {
		t.Fatalf("clean egress: %+v", e)
	}
	if v := metricLine(prom, `evs_egress_listed{egress="direct",list="bl.test"}`); v != "0" {
		t.Errorf("listed gauge before listing: %s", v)
	}
	if v := metricLine(prom, `evs_egress_helo_confirmed{egress="direct"}`); v != "1" {
		t.Errorf("HELO gauge: %s", v)
	}

	dns.AddRecord("1.0.0.127.bl.test. 300 IN A 127.0.0.2")
	waitFor(t, "the listing in /readyz", func() bool {
		bl := h.egress().Blocklists
		return len(bl) == 1 && bl[0].Listed && len(bl[0].Codes) == 1 && bl[0].Codes[0] == "127.0.0.2"
	})
	if v := metricLine(prom, `evs_egress_listed{egress="direct",list="bl.test"}`); v != "1" {
		t.Errorf("listed gauge after listing: %s", v)
	}
	waitFor(t, "the warning in the log", func() bool { return strings.Contains(h.logs.String(), "on a DNS blocklist") })
}

// TestBlockedShare: the share of live verdicts whose server refused us is
// counted per provider over the last 15 minutes, in /readyz and as a
// gauge; verdicts without a reply, and test-mode ones, do not count.
func TestBlockedShare(t *testing.T) {
	prom := server.NewPrometheus(nil)
	h := start(t, options{
		rcpt: func(addr string) string {
			switch {
			case strings.HasPrefix(addr, "blocked"):
				return "554 5.7.1 Service unavailable; Client host [127.0.0.1] blocked using zen.spamhaus.org"
			case strings.HasPrefix(addr, "alice@"):
				return "250 2.1.5 OK"
			}
			return "550 5.1.1 <" + addr + ">: Recipient address rejected: User unknown in virtual mailbox table"
		},
		server: func(o *server.Options) { o.Metrics = prom },
	})
	if b := h.egress().Blocked; len(b) != 0 {
		t.Fatalf("before any verdict: %+v", b)
	}
	for _, c := range []struct{ key, email string }{
		{h.liveKey, "blocked1@good.example"},
		{h.liveKey, "blocked2@good.example"},
		{h.liveKey, "alice@good.example"},
		{h.liveKey, "nobody@good.example"},
		{h.liveKey, "someone@nomx.example"}, // no mail host: no reply
		{h.testKey, "blocked@x.example"},    // test mode: made-up evidence
	} {
		if r := h.do(req{method: "POST", path: "/v1/verify", key: c.key, body: `{"email":"` + c.email + `"}`}); r.status != 200 {
			t.Fatalf("verify %s: %d %s", c.email, r.status, r.body)
		}
	}
	b := h.egress().Blocked
	if len(b) != 1 || b[0].Provider != "other" || b[0].Answered != 4 || b[0].Blocked != 2 || b[0].Share != 0.5 {
		t.Fatalf("blocked share: %+v, want other 2 of 4", b)
	}
	if v := metricLine(prom, `evs_smtp_blocked_share{egress="direct",provider="other"}`); v != "0.5" {
		t.Errorf("blocked share gauge: %s", v)
	}
	h.clock.Advance(16 * time.Minute)
	if b := h.egress().Blocked; len(b) != 0 {
		t.Errorf("16 minutes later: %+v, want nothing in the window", b)
	}
}
