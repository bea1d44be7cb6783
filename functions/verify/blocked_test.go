package main_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/miekg/dns"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// answerCounts reads the EMF lines of counted answers in logs (from byte
// offset from): the sums of SmtpAnswered and SmtpBlocked, by "egress
// provider".
func answerCounts(logs string, from int) map[string][2]float64 {
	got := map[string][2]float64{}
	for _, line := range strings.Split(logs[from:], "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["_aws"] == nil {
			continue
		}
		a, ok := rec[app.SmtpAnswered].(float64)
		if !ok {
			continue
		}
		b, _ := rec[app.SmtpBlocked].(float64)
		k := fmt.Sprintf("%v %v", rec["egress"], rec["provider"])
		c := got[k]
		got[k] = [2]float64{c[0] + a, c[1] + b}
	}
	return got
}

// TestLambdaVerifyExitsBlocked runs the real verify function with two SOCKS
// exits (Dante, connecting out from 127.0.0.41 and .42), the loopback DNS
// server with a blocklist zone and a loopback mail server that tells
// which exit each session came through. The function keeps the rule evs
// serve keeps, in each instance:
//   - its own self-check, at cold start and then whenever a call finds the
//     findings older than EVS_SELFCHECK_EVERY, in the background: with
//     .41 listed, the provider that goes through .41 goes through .42,
//     and back through .41 once a refreshed check finds it delisted;
//   - the blocked share: once at least half of .41's answers for that
//     provider (at least 5) are refusals of us, .42 takes its probes;
//   - each answer emitted as EMF counts per exit and provider, whose sums
//     are the blocked share.
func TestLambdaVerifyExitsBlocked(t *testing.T) {
	const exitA, exitB = "127.0.0.41", "127.0.0.42"
	da, db := testkit.StartDante(t, exitA), testkit.StartDante(t, exitB)
	proxy := da.URL() + "#" + exitA + "," + db.URL() + "#" + exitB
	var refuseA atomic.Bool
	mx := testkit.StartSMTP(t, testkit.SMTPOptions{RcptFrom: func(client, addr string) string {
		switch {
		case client == exitA && refuseA.Load():
			return "554 5.7.1 Service unavailable; Client host [" + client + "] blocked using zen.spamhaus.org"
		case strings.HasPrefix(addr, "alice@"):
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 <" + addr + ">: Recipient address rejected: User unknown in virtual mailbox table"
	}})
	d := testkit.StartDNS(t)
	exits, domain := domainOnExitA(t, proxy, "p")
	d.AddRecord(domain + ". 300 IN MX 10 mx." + domain + ".")
	d.AddRecord("mx." + domain + ". 300 IN A 127.0.0.1")
	nameA, nameB := exits[0].Name, exits[1].Name

	w := newAWSWorld(t)
	_, acct := w.seedKey(t, false)
	const every = time.Second
	rt, logs, _ := w.runLogged(t, build(t, "verify"),
		"EVS_SMTP_PROXY="+proxy,
		"EVS_EGRESS_ALLOW=127.0.0.0/8",
		"EVS_DNS_SERVERS="+d.Addr,
		"EVS_SMTP_PORT="+fmt.Sprint(mx.Port),
		"EVS_BLOCKLISTS=bl.test",
		"EVS_SELFCHECK_EVERY="+every.String(),
		// Every call probes: no verdict comes from the result cache, and
		// the politeness budget of the one provider is not what is tested.
		"EVS_CACHE_TTL=0",
		"EVS_PROVIDER_RCPT_PER_MIN=1000",
	)
	call := func(email, mode string) (reason, from string) {
		t.Helper()
		n := len(mx.Clients())
		var body struct {
			Decision struct {
				Reason string `json:"reason"`
			} `json:"decision"`
		}
		verifyOn(t, rt, acct, `{"email":"`+email+`","mode":"`+mode+`"}`, 30*time.Second, &body)
		if c := mx.Clients(); len(c) > n {
			from = c[n]
			for _, other := range c[n:] {
				if other != from {
					t.Fatalf("%s: one verification came from %v", email, c[n:])
				}
			}
		}
		return body.Decision.Reason, from
	}
	// listedA waits until a self-check that started after from says exit
	// A is listed (or not), nudging the function with quick calls, which
	// probe nothing: a call finding stale findings starts the check in
	// its background.
	listedA := func(step string, from int, want bool) {
		t.Helper()
		wantA := map[bool]float64{true: 1, false: 0}[want]
		testkit.EventuallyEvery(t, 30*time.Second, every/4, func() error {
			got := selfCheckValues(logs.String(), from)
			a, okA := got["evs_egress_listed "+nameA+" bl.test"]
			b, okB := got["evs_egress_listed "+nameB+" bl.test"]
			if okA && okB && a == wantA && b == 0 {
				return nil
			}
			call("alice@"+domain, "quick")
			return fmt.Errorf("%s: no self-check said A listed=%v: %v", step, want, got)
		})
	}

	listedA("at cold start", 0, false)
	for i := 0; i < 2; i++ {
		if reason, from := call("alice@"+domain, "full"); reason != "accepted_email" || from != exitA {
			t.Fatalf("clean, verification %d: %s from %q, want accepted_email from %s", i+1, reason, from, exitA)
		}
	}

	mark := len(logs.String())
	d.AddRecord("41.0.0.127.bl.test. 300 IN A 127.0.0.2")
	listedA("A listed", mark, true)
	for i := 0; i < 3; i++ {
		if reason, from := call("alice@"+domain, "full"); reason != "accepted_email" || from != exitB {
			t.Fatalf("A listed, verification %d: %s from %q, want accepted_email from %s", i+1, reason, from, exitB)
		}
	}

	mark = len(logs.String())
	d.SetRcode("41.0.0.127.bl.test.", dns.RcodeNameError)
	listedA("A delisted", mark, false)
	if reason, from := call("alice@"+domain, "full"); reason != "accepted_email" || from != exitA {
		t.Fatalf("A delisted: %s from %q, want accepted_email from %s", reason, from, exitA)
	}

	// The provider's servers start refusing A's address. A's window
	// holds its 3 accepts: after 3 refusals, half of 6 answers (at least
	// 5) refused us, so A is avoided for the provider and B takes its
	// probes.
	refuseA.Store(true)
	blocked := 0
	for i := 0; i < 10; i++ {
		reason, from := call("alice@"+domain, "full")
		if from == exitB {
			if reason != "accepted_email" {
				t.Fatalf("through B: %s", reason)
			}
			break
		}
		if reason != "blocked" || from != exitA {
			t.Fatalf("refused through A, verification %d: %s from %q", i+1, reason, from)
		}
		blocked++
	}
	if blocked != 3 {
		t.Errorf("A was avoided after %d refusals, want 3 (of 6 answers)", blocked)
	}
	if reason, from := call("alice@"+domain, "full"); reason != "accepted_email" || from != exitB {
		t.Fatalf("A avoided: %s from %q, want accepted_email from %s", reason, from, exitB)
	}

	// Every answer was counted under the exit it came through. The
	// function writes a call's EMF line as it answers: the last may reach
	// the log after the reply reached the test.
	want := map[string][2]float64{
		nameA + " other": {2 + 1 + 3, 3},
		nameB + " other": {3 + 2, 0},
	}
	answers := func(counts map[string][2]float64) (n float64) {
		for _, c := range counts {
			n += c[0]
		}
		return n
	}
	var got map[string][2]float64
	logs.Await(t, 10*time.Second, fmt.Sprintf("the EMF lines of %v answers", answers(want)), func(s string) bool {
		got = answerCounts(s, 0)
		return answers(got) >= answers(want)
	})
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("EMF answered/blocked by exit and provider: %v, want %v", got, want)
	}
}

// TestLambdaWorkerExitsListed runs the real requests and worker binaries
// with two SOCKS exits, .41's address listed from the start: the worker's
// own check at cold start steers a batch's probes of the provider that
// goes through .41 to .42. Once .41 is delisted, a batch finding the
// findings older than EVS_SELFCHECK_EVERY refreshes them in its
// background, and the next batch goes through .41 again. Every answer is
// counted per exit and provider (EMF), as the verify function counts.
func TestLambdaWorkerExitsListed(t *testing.T) {
	const exitA, exitB = "127.0.0.41", "127.0.0.42"
	da, db := testkit.StartDante(t, exitA), testkit.StartDante(t, exitB)
	proxy := da.URL() + "#" + exitA + "," + db.URL() + "#" + exitB
	mx := testkit.StartSMTP(t, testkit.SMTPOptions{Rcpt: func(addr string) string {
		for _, user := range []string{"alice@", "bob@", "carol@", "dave@", "erin@"} {
			if strings.HasPrefix(addr, user) {
				return "250 2.1.5 OK"
			}
		}
		return "550 5.1.1 <" + addr + ">: Recipient address rejected: User unknown in virtual mailbox table"
	}})
	exits, domain := domainOnExitA(t, proxy, "w")
	d := testkit.StartDNS(t)
	d.AddRecord(domain + ". 300 IN MX 10 mx." + domain + ".")
	d.AddRecord("mx." + domain + ". 300 IN A 127.0.0.1")
	d.AddRecord("41.0.0.127.bl.test. 300 IN A 127.0.0.2")
	nameA, nameB := exits[0].Name, exits[1].Name

	w := newAWSWorld(t)
	_, acct := w.seedKey(t, false)
	env := []string{
		"EVS_SMTP_PROXY=" + proxy,
		"EVS_EGRESS_ALLOW=127.0.0.0/8",
		"EVS_DNS_SERVERS=" + d.Addr,
		"EVS_SMTP_PORT=" + fmt.Sprint(mx.Port),
		"EVS_BLOCKLISTS=bl.test",
		"EVS_SELFCHECK_EVERY=1s",
		"EVS_CACHE_TTL=0",
		"EVS_PROVIDER_RCPT_PER_MIN=1000",
	}
	requests := w.start(t, build(t, "requests"), env...)
	worker, logs, _ := w.runLogged(t, build(t, "worker"), env...)
	listed := func(step string, from int, wantA float64) {
		t.Helper()
		logs.Await(t, 30*time.Second, fmt.Sprintf("%s: a self-check of the worker saying A listed=%v", step, wantA), func(s string) bool {
			got := selfCheckValues(s, from)
			a, ok := got["evs_egress_listed "+nameA+" bl.test"]
			return ok && a == wantA && got["evs_egress_listed "+nameB+" bl.test"] == 0
		})
	}
	batch := func(step string, emails ...string) []string {
		t.Helper()
		n := len(mx.Clients())
		b, _ := json.Marshal(map[string]any{"emails": emails, "mode": "full"})
		out, err := requests.Invoke(proxyEvent("POST", "/v1/requests", "/v1/requests", nil, acct, string(b)), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var resp events.APIGatewayProxyResponse
		if err := json.Unmarshal(out.Response, &resp); err != nil || resp.StatusCode != 201 {
			t.Fatalf("%s: create: %s %s", step, out.Response, out.Error)
		}
		var created struct {
			Request struct{ ID string } `json:"request"`
		}
		if err := json.Unmarshal([]byte(resp.Body), &created); err != nil || created.Request.ID == "" {
			t.Fatalf("%s: create: %s", step, resp.Body)
		}
		feedWorker(t, w, worker, acct.ID, created.Request.ID, false)
		return mx.Clients()[n:]
	}
	only := func(step string, from []string, want string) {
		t.Helper()
		if len(from) == 0 {
			t.Fatalf("%s: no session reached the mail server", step)
		}
		for _, f := range from {
			if f != want {
				t.Fatalf("%s: sessions from %v, want every one from %s", step, from, want)
			}
		}
	}

	listed("at cold start", 0, 1)
	only("A listed", batch("A listed", "alice@"+domain, "bob@"+domain, "nobody@"+domain), exitB)

	mark := len(logs.String())
	d.SetRcode("41.0.0.127.bl.test.", dns.RcodeNameError)
	// The findings grow older than EVS_SELFCHECK_EVERY: by the worker's
	// own record of its last check (the EMF lines' time), more than 1 s
	// ago.
	last := lastSelfCheck(t, logs.String())
	testkit.EventuallyEvery(t, 10*time.Second, 50*time.Millisecond, testkit.Until(func() bool { return time.Since(last) > time.Second },
		"the last self-check, at %s, is not older than EVS_SELFCHECK_EVERY", last))
	batch("A delisted, findings stale", "carol@"+domain)
	listed("A delisted", mark, 0)
	only("A delisted, checked again", batch("A delisted, checked again", "dave@"+domain, "erin@"+domain), exitA)

	got := answerCounts(logs.String(), 0)
	if a, b := got[nameA+" other"], got[nameB+" other"]; a[0]+b[0] != 6 || a[1]+b[1] != 0 || b[0] < 3 || a[0] < 2 {
		t.Errorf("EMF answered/blocked by exit and provider: %v, want 6 answers, none refused, at least 3 through B and 2 through A", got)
	}
}

// domainOnExitA parses proxy's exits and finds a mail domain (prefix and
// a number, .example) whose provider the exits' rendezvous puts on exit A
// (index 0) when both are clean: the functions' own Exits agree, made from
// the same configuration.
func domainOnExitA(t *testing.T, proxy, prefix string) ([]config.SMTPExit, string) {
	t.Helper()
	exits, err := config.ParseSMTPExits(proxy)
	if err != nil {
		t.Fatal(err)
	}
	x, err := verify.NewExits(config.Config{SMTPExits: exits}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if c := fmt.Sprintf("%s%d.example", prefix, i); x.For("mx."+c) == 0 {
			return exits, c
		}
	}
	t.Fatal("100 providers, none on exit A")
	return nil, ""
}
