package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
	mdns "github.com/miekg/dns"
)

// The loopback addresses the two exits of these tests connect out from:
// no other test uses them.
const exitA, exitB = "127.0.0.41", "127.0.0.42"

// exitsHarness is a server whose prober goes through two real Dante
// exits, and two providers, one on each.
type exitsHarness struct {
	*harness
	x      *smtpprobe.Exits
	dantes [2]*testkit.Dante
	names  [2]string // the exits' names: "127.0.0.1:PORT"
	on     [2]string // a mail domain whose provider goes to exit 0, and one to 1
	prom   *server.Prometheus
}

func startExits(t *testing.T, o options) *exitsHarness {
	t.Helper()
	ds := [2]*testkit.Dante{testkit.StartDante(t, exitA), testkit.StartDante(t, exitB)}
	exits, err := config.ParseSMTPExits(ds[0].URL() + "#" + exitA + "," + ds[1].URL() + "#" + exitB)
	if err != nil {
		t.Fatal(err)
	}
	loopback, _ := config.ParseEgress("127.0.0.0/8")
	x, err := smtpprobe.NewExits(smtpprobe.ExitsConfig{Exits: exits, Policy: loopback, Key: verify.ProviderKey,
		Retry: 100 * time.Millisecond, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	prom := server.NewPrometheus(nil)
	o.exits = x
	tune := o.server
	o.server = func(so *server.Options) {
		so.Config.SMTPExits = exits
		so.Metrics = prom
		if tune != nil {
			tune(so)
		}
	}
	e := &exitsHarness{harness: start(t, o), x: x, dantes: ds, names: [2]string{exits[0].Name, exits[1].Name}, prom: prom}
	for i := 0; i < 100 && (e.on[0] == "" || e.on[1] == ""); i++ {
		d := fmt.Sprintf("p%d.example", i)
		if k := x.For("mx." + d); e.on[k] == "" {
			e.on[k] = d
			e.dns.AddRecord(d + ". 300 IN MX 10 mx." + d + ".")
			e.dns.AddRecord("mx." + d + ". 300 IN A 127.0.0.1")
		}
	}
	if e.on[0] == "" || e.on[1] == "" {
		t.Fatalf("100 providers all on one exit: %q", e.on)
	}
	return e
}

// verify asks /v1/verify about email and returns the status code, the
// verdict's reason and the address the mail server saw the session come
// from ("" when none came).
func (e *exitsHarness) verify(email string) (status int, reason, from string) {
	e.t.Helper()
	n := len(e.smtp.Clients())
	r := e.do(req{method: "POST", path: "/v1/verify", key: e.liveKey, body: `{"email":"` + email + `","mode":"full"}`})
	var b struct {
		Decision struct {
			Reason string `json:"reason"`
		} `json:"decision"`
	}
	_ = json.Unmarshal(r.body, &b)
	if c := e.smtp.Clients(); len(c) > n {
		from = c[n]
		for _, other := range c[n:] {
			if other != from {
				e.t.Fatalf("%s: one verification came from %v", email, c[n:])
			}
		}
	}
	return r.status, b.Decision.Reason, from
}

// exitsBody is /readyz's egress.exits.
type exitsBody []struct {
	Index   int      `json:"index"`
	Name    string   `json:"name"`
	Up      bool     `json:"up"`
	Detail  string   `json:"detail"`
	Avoided []string `json:"avoided"`
	Address string   `json:"address"`
	// Blocklists is the exit's last self-check of its address.
	Blocklists []struct {
		Zone   string `json:"zone"`
		Listed bool   `json:"listed"`
	} `json:"blocklists"`
	Blocked []struct {
		Provider string  `json:"provider"`
		Answered int     `json:"answered"`
		Share    float64 `json:"share"`
	} `json:"blocked"`
}

func (e *exitsHarness) exits() exitsBody {
	e.t.Helper()
	r := e.do(req{path: server.ReadyPath})
	var b struct {
		Egress struct {
			Name  string    `json:"name"`
			Exits exitsBody `json:"exits"`
		} `json:"egress"`
	}
	if err := json.Unmarshal(r.body, &b); err != nil || r.status != 200 || len(b.Egress.Exits) != 2 {
		e.t.Fatalf("/readyz: %d %s (%v)", r.status, r.body, err)
	}
	if b.Egress.Name != e.names[0]+"+"+e.names[1] {
		e.t.Errorf("egress name %q", b.Egress.Name)
	}
	return b.Egress.Exits
}

func (e *exitsHarness) upGauge(i int) string {
	return metricLine(e.prom, fmt.Sprintf(`evs_smtp_exit_up{exit=%q,index="%d"}`, e.names[i], i))
}

// TestServeExitsFailover: on evs serve, two providers spread over two real
// SOCKS exits; one exit stopped, its provider gets our failure (503, no
// verdict) and then moves to the other exit; started again, the exit
// takes its provider back. /readyz and the metrics say so all along.
func TestServeExitsFailover(t *testing.T) {
	e := startExits(t, options{})
	for round := 0; round < 2; round++ {
		for i, want := range []string{exitA, exitB} {
			if st, reason, from := e.verify("alice@" + e.on[i]); st != 200 || reason != "accepted_email" || from != want {
				t.Fatalf("round %d, %s: %d %s from %q, want 200 accepted_email from %s", round, e.on[i], st, reason, from, want)
			}
		}
	}
	if ex := e.exits(); !ex[0].Up || !ex[1].Up || ex[0].Address != exitA || ex[1].Name != e.names[1] {
		t.Fatalf("/readyz exits: %+v", ex)
	}
	if g := e.upGauge(0); g != "1" {
		t.Fatalf("exit 0 up gauge: %s", g)
	}

	e.dantes[0].Stop()
	if st, _, from := e.verify("alice@" + e.on[0]); st != 503 || from != "" {
		t.Fatalf("exit A stopped: %d from %q, want 503 and no session", st, from)
	}
	for i := range e.on {
		if st, reason, from := e.verify("alice@" + e.on[i]); st != 200 || reason != "accepted_email" || from != exitB {
			t.Fatalf("exit A out, %s: %d %s from %q, want 200 from %s", e.on[i], st, reason, from, exitB)
		}
	}
	if ex := e.exits(); ex[0].Up || ex[0].Detail == "" || !ex[1].Up {
		t.Fatalf("/readyz exits with A out: %+v", ex)
	}
	if g := e.upGauge(0); g != "0" {
		t.Fatalf("exit 0 up gauge with A out: %s", g)
	}

	e.dantes[0].Start()
	waitFor(t, "exit A back for its provider", func() bool {
		st, _, from := e.verify("alice@" + e.on[0])
		return st == 200 && from == exitA
	})
	if st, _, from := e.verify("alice@" + e.on[1]); st != 200 || from != exitB {
		t.Fatalf("after A's return, %s: %d from %q", e.on[1], st, from)
	}
	if ex := e.exits(); !ex[0].Up || e.upGauge(0) != "1" {
		t.Fatalf("/readyz exits after A's return: %+v", ex)
	}

	// Every exit out: our failure, never a verdict.
	e.dantes[0].Stop()
	e.dantes[1].Stop()
	for i := 0; i < 3; i++ {
		for _, d := range e.on {
			if st, reason, from := e.verify("alice@" + d); st != 503 || from != "" {
				t.Fatalf("every exit stopped, %s: %d %s from %q, want 503", d, st, reason, from)
			}
		}
	}
}

// TestServeExitsBlockedShare: the mail server refuses every session from
// exit A's address ("listed"); once most of a provider's answers through
// A in the window are refusals, A takes none of that provider's probes
// while B can, and /readyz and the gauge say why. When the window has
// aged the refusals out, A is tried again.
func TestServeExitsBlockedShare(t *testing.T) {
	e := startExits(t, options{rcptFrom: func(client, addr string) string {
		switch {
		case client == exitA:
			return "554 5.7.1 Service unavailable; Client host [" + client + "] blocked using zen.spamhaus.org"
		case strings.HasPrefix(addr, "alice@"):
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 <" + addr + ">: Recipient address rejected: User unknown in virtual mailbox table"
	}})
	d := e.on[0]
	for i := 0; i < 5; i++ {
		if st, reason, from := e.verify("alice@" + d); st != 200 || reason != "blocked" || from != exitA {
			t.Fatalf("verification %d of %s: %d %s from %q, want 200 blocked from %s", i+1, d, st, reason, from, exitA)
		}
	}
	for i := 0; i < 3; i++ {
		if st, reason, from := e.verify("alice@" + d); st != 200 || reason != "accepted_email" || from != exitB {
			t.Fatalf("A avoided, %s: %d %s from %q, want 200 accepted_email from %s", d, st, reason, from, exitB)
		}
	}
	ex := e.exits()
	if !ex[0].Up || len(ex[0].Avoided) != 1 || ex[0].Avoided[0] != "other" || len(ex[0].Blocked) != 1 || ex[0].Blocked[0].Share != 1 ||
		len(ex[1].Avoided) != 0 || len(ex[1].Blocked) != 1 || ex[1].Blocked[0].Share != 0 {
		t.Fatalf("/readyz exits: %+v", ex)
	}
	if g := metricLine(e.prom, fmt.Sprintf(`evs_smtp_blocked_share{egress=%q,provider="other"}`, e.names[0])); g != "1" {
		t.Errorf("exit A's blocked share gauge: %s", g)
	}
	// The counts the AWS functions emit too: every answer under the exit
	// it came through.
	for _, c := range []struct {
		metric string
		exit   int
		want   string
	}{
		{"evs_smtp_answered_total", 0, "5"}, {"evs_smtp_blocked_total", 0, "5"},
		{"evs_smtp_answered_total", 1, "3"}, {"evs_smtp_blocked_total", 1, "0"},
	} {
		if g := metricLine(e.prom, fmt.Sprintf(`%s{egress=%q,provider="other"}`, c.metric, e.names[c.exit])); g != c.want {
			t.Errorf("%s of exit %d: %s, want %s", c.metric, c.exit, g, c.want)
		}
	}
	e.clock.Advance(16 * time.Minute)
	if st, reason, from := e.verify("alice@" + d); st != 200 || reason != "blocked" || from != exitA {
		t.Fatalf("16 minutes later, %s: %d %s from %q, want A tried again", d, st, reason, from)
	}
}

// TestServeExitsListed: exit A's address (127.0.0.41) appears in the test
// DNS server's blocklist zone. Within one self-check interval /readyz and
// the gauge say so, and the provider that went through A now goes through
// B, whose address is not listed, while no server has refused anybody
// yet; once the listing is gone, the next check puts A back.
func TestServeExitsListed(t *testing.T) {
	const every = 200 * time.Millisecond
	dns := testkit.StartDNS(t)
	e := startExits(t, options{server: func(o *server.Options) {
		o.Config.DNSServers = []string{dns.Addr}
		o.Config.Blocklists = []string{"bl.test"}
		o.SelfCheckEvery = every
	}})
	listedA := func() bool {
		ex := e.exits()
		return len(ex[0].Blocklists) == 1 && ex[0].Blocklists[0].Listed && len(ex[1].Blocklists) == 1 && !ex[1].Blocklists[0].Listed
	}
	gauge := func(i int) string {
		return metricLine(e.prom, fmt.Sprintf(`evs_egress_listed{egress=%q,list="bl.test"}`, e.names[i]))
	}
	d := e.on[0]
	steps := []struct {
		name   string
		change func()
		listed bool
		from   string
	}{
		{"clean", nil, false, exitA},
		{"A listed", func() { dns.AddRecord("41.0.0.127.bl.test. 300 IN A 127.0.0.2") }, true, exitB},
		{"A delisted", func() { dns.SetRcode("41.0.0.127.bl.test.", mdns.RcodeNameError) }, false, exitA},
	}
	// A's blocklist name, looked up once by each check.
	const listing = "41.0.0.127.bl.test."
	for _, s := range steps {
		lookups := dns.QueriesFor(listing, mdns.TypeA)
		if s.change != nil {
			s.change()
		}
		waitFor(t, s.name+": /readyz", func() bool {
			ex := e.exits()
			return len(ex[0].Blocklists) == 1 && ex[0].Blocklists[0].Listed == s.listed
		})
		// The next check says so: the first lookup after the change sees
		// it, and /readyz shows that check's findings, a second at most
		// having started while the poll looked.
		if n := dns.QueriesFor(listing, mdns.TypeA) - lookups; n > 2 {
			t.Errorf("%s: /readyz said so after %d checks of A's address, want the next one", s.name, n)
		}
		if want := map[bool]string{true: "1", false: "0"}[s.listed]; gauge(0) != want || gauge(1) != "0" {
			t.Errorf("%s: listed gauges A=%s B=%s, want A=%s B=0", s.name, gauge(0), gauge(1), want)
		}
		if s.listed && !listedA() {
			t.Errorf("%s: /readyz exits %+v", s.name, e.exits())
		}
		for i := 0; i < 3; i++ {
			if st, reason, from := e.verify("alice@" + d); st != 200 || reason != "accepted_email" || from != s.from {
				t.Fatalf("%s, verification %d of %s: %d %s from %q, want 200 accepted_email from %s", s.name, i+1, d, st, reason, from, s.from)
			}
		}
	}
}

// TestServeExitsBatch: a live batch over two providers runs while one
// exit is stopped. Nothing is decided on our failure: every verdict is
// the mail server's, reached through the exit still in rotation.
func TestServeExitsBatch(t *testing.T) {
	e := startExits(t, options{realClock: true, worker: batch.Worker{Processor: &batch.Processor{ExitRetry: 100 * time.Millisecond}}})
	e.dantes[0].Stop()
	emails := []string{"alice@" + e.on[0], "nobody@" + e.on[0], "bob@" + e.on[0], "alice@" + e.on[1], "nobody@" + e.on[1]}
	got := e.fullBatch(e.liveKey, emails, "", 30*time.Second)
	want := map[string]string{"alice": "accepted_email", "bob": "accepted_email", "nobody": "rejected_email"}
	for _, m := range emails {
		d := got[m]
		local, _, _ := strings.Cut(m, "@")
		smtp, _ := d["checks"].(map[string]any)["smtp"].(map[string]any)
		if d["reason"] != want[local] || smtp["code"] == nil {
			t.Errorf("%s: %v %v, want %s from the server", m, d["reason"], smtp, want[local])
		}
	}
	for _, c := range e.smtp.Clients() {
		if c != exitB {
			t.Fatalf("a session came from %s with exit A stopped: %v", c, e.smtp.Clients())
		}
	}
	if ex := e.exits(); ex[0].Up || !ex[1].Up {
		t.Fatalf("/readyz exits: %+v", ex)
	}
}
