package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
)

// hungExits are the ways an exit hangs: a stopped host behind a live
// port, and one that answers the greeting and never the CONNECT.
var hungExits = map[string]testkit.SOCKS5Fault{"silent": {Silent: true}, "greeting only": {}}

// verifyStatus is POST /v1/verify in full mode: the reply, and its status
// (deliverable...) or error code.
func (s *suite) verifyStatus(t *testing.T, key, email string) (reply, string) {
	t.Helper()
	r := s.do(t, key, httpCall{method: http.MethodPost, path: "/v1/verify", body: `{"email":"` + email + `","mode":"full"}`})
	var m struct {
		Status string `json:"status"`
		Error  struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("verify %s: %v %s", email, err, r.body)
	}
	return r, m.Status + m.Error.Code
}

// TestSuiteHungExit: a SOCKS exit that hangs is our failure, never a
// verdict, on both deployments. A batch over it decides nothing: its
// addresses wait past the exit timeout, when a verdict would have come,
// until the batch deadline ends them; /v1/verify answers 503 unavailable
// with Retry-After. The mail server is never reached.
//
// Not parallel with other tests: the AWS half parks its groups until the
// batch deadline (3 s), as TestWorkerHostLeasesAcrossInvocations. The two
// faults go at once, each over an exit of its own.
func TestSuiteHungExit(t *testing.T) {
	for name, fault := range hungExits {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			exit := testkit.StartFaultySOCKS5(t, "127.0.0.1", fault)
			env := map[string]string{"EVS_SMTP": "proxy", "EVS_SMTP_PROXY": exit.URL(), "EVS_SMTP_EXIT_TIMEOUT": "200ms",
				"EVS_BATCH_DEADLINE": "3s", "EVS_CACHE_TTL": "0"}
			forEachDeployment(t, suiteOptions{rcpt: suiteRcpt, env: env, shared: true}, func(t *testing.T, s *suite) {
				_, key := s.account(t, false)
				before := exit.Connections()
				emails := []string{"ok1@good.example", "ok2@good.example", "no@other.example"}
				list, _ := json.Marshal(emails)
				id, _ := s.create(t, key, `{"emails":`+string(list)+`,"mode":"full"}`)
				eventually(t, 10*time.Second, "the batch dials the exit", func() bool { return exit.Connections() > before })

				r, code := s.verifyStatus(t, key, "ok3@good.example")
				if r.status != http.StatusServiceUnavailable || code != "unavailable" || r.header.Get("Retry-After") == "" {
					t.Fatalf("verify through a hung exit: %d %q Retry-After %q: %s", r.status, code, r.header.Get("Retry-After"), r.body)
				}

				if e := s.final(t, key, id); e.Request.State != "completed" {
					t.Fatalf("batch %s: %+v", id, e.Request)
				}
				got := s.results(t, key, id)
				for _, addr := range emails {
					d := got[addr]
					smtp, _ := d["checks"].(map[string]any)["smtp"].(map[string]any)
					if d["reason"] != "timeout" || smtp["detail"] != batch.DetailDeadline {
						t.Errorf("%s: decided before the deadline: %v", addr, d)
					}
				}
				if n := s.smtp.Connections(); n != 0 {
					t.Fatalf("the mail server saw %d connections", n)
				}
			})
		})
	}
}

// TestSuiteHungExitLeaves: a hung exit beside a healthy one (a real
// Dante) leaves the rotation with its first timed-out connection, and
// its provider's calls of /v1/verify go through the healthy exit.
//
// Not parallel: the healthy exit must answer within the 300 ms exit
// timeout, which the other tests' load must not eat into.
func TestSuiteHungExitLeaves(t *testing.T) {
	dante := testkit.SOCKS5(t)
	for name, fault := range hungExits {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			hung := testkit.StartFaultySOCKS5(t, "127.0.0.51", fault)
			proxies := hung.URL() + "," + dante.URL
			// A domain whose provider the hash puts on the hung exit.
			exits, err := config.ParseSMTPExits(proxies)
			if err != nil {
				t.Fatal(err)
			}
			x, err := verify.NewExits(config.Config{SMTPExits: exits}, nil)
			if err != nil {
				t.Fatal(err)
			}
			domain := ""
			for i := 0; i < 100 && domain == ""; i++ {
				if x.For(fmt.Sprintf("mx.d%d.example", i)) == 0 {
					domain = fmt.Sprintf("d%d.example", i)
				}
			}
			if domain == "" {
				t.Fatal("no provider of 100 on the hung exit")
			}
			env := map[string]string{"EVS_SMTP": "proxy", "EVS_SMTP_PROXY": proxies, "EVS_SMTP_EXIT_TIMEOUT": "300ms", "EVS_CACHE_TTL": "0"}
			forEachDeployment(t, suiteOptions{rcpt: suiteRcpt, env: env, shared: true}, func(t *testing.T, s *suite) {
				s.dns.AddRecord(domain + ". 300 IN MX 10 mx." + domain + ".")
				s.dns.AddRecord("mx." + domain + ". 300 IN A 127.0.0.1")
				_, key := s.account(t, false)
				before := hung.Connections()
				deliverable := 0
				for i := range 6 {
					if r, status := s.verifyStatus(t, key, fmt.Sprintf("ok%d@%s", i, domain)); r.status == http.StatusOK && status == "deliverable" {
						deliverable++
					}
				}
				t.Logf("%d of 6 calls deliverable", deliverable)
				if deliverable < 4 {
					t.Fatalf("%d of 6 calls deliverable, want at least 4", deliverable)
				}
				if hung.Connections() == before {
					t.Fatal("the hung exit was never tried: the test shows nothing")
				}
				for _, from := range s.smtp.Clients() {
					if from != dante.External {
						t.Fatalf("a session came from %s, not the healthy exit %s", from, dante.External)
					}
				}
			})
		})
	}
}

// TestCountExitTimeout: a verification through a hung exit is counted as
// our exit's failure (evs_smtp_connection_failures_total{result="exit"},
// which SmtpExitFailuresAlarm watches on AWS), not as a verdict or a
// server's timeout.
func TestCountExitTimeout(t *testing.T) {
	t.Parallel()
	for name, fault := range hungExits {
		t.Run(name, func(t *testing.T) {
			exit := testkit.StartFaultySOCKS5(t, "127.0.0.1", fault)
			p := startPeers(t, suiteRcpt)
			env := suiteEnv(p)
			env["EVS_SMTP"], env["EVS_SMTP_PROXY"], env["EVS_SMTP_EXIT_TIMEOUT"] = "proxy", exit.URL(), "200ms"
			cfg, err := config.FromEnv(func(k string) string { return env[k] }, false)
			if err != nil {
				t.Fatal(err)
			}
			engine, _, err := verify.Build(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := &recorder{}
			app.Count(engine, r).Verify(context.Background(), verify.Inspect("ok@good.example"), evs.ModeFull)
			if fmt.Sprint(r.got) != "[connfail exit]" {
				t.Fatalf("observed %q, want one exit failure", r.got)
			}
			if exit.Connections() == 0 {
				t.Fatal("the exit was never dialled")
			}
		})
	}
}

// TestSuiteExitsSpreadAProvider: a batch at one provider (two domains of
// its MX host) whose RCPT budget a minute, per exit, covers half of it
// spreads over two exits (real Dantes), each spending its own: it
// completes within the first window, and its sessions came from both
// exits' addresses.
func TestSuiteExitsSpreadAProvider(t *testing.T) {
	t.Parallel()
	a, b := testkit.StartDante(t, "127.0.0.71"), testkit.StartDante(t, "127.0.0.72")
	env := map[string]string{"EVS_SMTP": "proxy", "EVS_SMTP_PROXY": a.URL() + "," + b.URL(), "EVS_CACHE_TTL": "0",
		"EVS_PROVIDER_RCPT_PER_MIN": "*=1048576,spread.example=8"}
	forEachDeployment(t, suiteOptions{rcpt: suiteRcpt, env: env}, func(t *testing.T, s *suite) {
		s.dns.AddRecord("mx.spread.example. 300 IN A 127.0.0.1")
		_, key := s.account(t, false)
		// Two groups of 7 addresses: 8 RCPT commands each with the
		// accept-all probe, an exit's budget.
		var emails []string
		for _, d := range []string{"one.example", "two.example"} {
			s.dns.AddRecord(d + ". 300 IN MX 10 mx.spread.example.")
			for i := range 7 {
				emails = append(emails, fmt.Sprintf("ok%d@%s", i, d))
			}
		}
		start := time.Now()
		s.fullBatch(t, key, emails, "")
		from := map[string]int{}
		for _, c := range s.smtp.Clients() {
			from[c]++
		}
		if from[a.External] == 0 || from[b.External] == 0 || len(from) != 2 {
			t.Fatalf("sessions by address: %v; want some from each exit, %s and %s", from, a.External, b.External)
		}
		t.Logf("done in %s; sessions by exit: %v", time.Since(start).Round(time.Millisecond), from)
	})
}
