package batch_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/testkit"
	"github.com/evs-dev/evs/internal/verify"
	"github.com/evs-dev/evs/internal/verify/dnscheck"
	"github.com/evs-dev/evs/internal/verify/smtpprobe"
)

// TestSessionLimitKeepsAnswers: a real session to a loopback server that
// answers two addresses at once and a third only after the group's time
// limit. The two answers received stand (contract, section 16); the
// address in flight and the one never asked are our limit's, not the
// mailboxes': retried at the next attempt, and only at the last do they
// end unknown/timeout.
func TestSessionLimitKeepsAnswers(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	peer := testkit.StartSMTP(t, testkit.SMTPOptions{Rcpt: func(addr string) string {
		switch {
		case strings.HasPrefix(addr, "yes@"):
			return "250 2.1.5 OK"
		case strings.HasPrefix(addr, "slow@"):
			select { // past the session's limit
			case <-release:
			case <-time.After(5 * time.Second):
			}
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 no such user"
	}})
	dns := testkit.StartDNS(t)
	dns.AddRecord("slow.example. 300 IN MX 10 mx.slow.example.")
	dns.AddRecord("mx.slow.example. 300 IN A 127.0.0.1")
	res, err := dnscheck.New(dnscheck.Config{Servers: []string{dns.Addr}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	loopback, err := config.ParseEgress("127.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	probe, err := smtpprobe.New(smtpprobe.Config{HELO: "probe.evs.test", Port: peer.Port, Resolver: res, Egress: loopback, ReplyTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := verify.New(verify.Config{Resolver: res, Prober: verify.SMTP(probe)})
	if err != nil {
		t.Fatal(err)
	}
	p := &batch.Processor{Engine: eng, MaxGreyAttempts: 2, SessionLimit: 1500 * time.Millisecond}
	var items []evs.Item
	for i, e := range []string{"yes@slow.example", "no@slow.example", "slow@slow.example", "never@slow.example"} {
		items = append(items, evs.Item{Seq: i, Email: e, Domain: "slow.example"})
	}
	g := batch.Group{Domain: "slow.example", Items: items}

	for attempt, wantRetry := range []int{2, 0} {
		o, err := p.VerifyGroup(context.Background(), time.Time{}, false, evs.ModeFull, g, attempt)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]evs.Decision{}
		for _, r := range o.Results {
			got[r.Email] = r.Decision
		}
		if d := got["yes@slow.example"]; d.Checks.SMTP.Code != 250 {
			t.Errorf("attempt %d: the accepted answer was not kept: %s %+v", attempt, d.Reason, d.Checks.SMTP)
		}
		if d := got["no@slow.example"]; d.Reason != evs.ReasonRejectedEmail || d.Checks.SMTP.Code != 550 {
			t.Errorf("attempt %d: the rejection was not kept: %s %+v", attempt, d.Reason, d.Checks.SMTP)
		}
		if len(o.Retry) != wantRetry || len(o.Left) != 0 {
			t.Errorf("attempt %d: retry %v left %v, want %d to retry", attempt, o.Retry, o.Left, wantRetry)
		}
		for _, e := range []string{"slow@slow.example", "never@slow.example"} {
			d, decided := got[e]
			switch {
			case wantRetry > 0 && decided:
				t.Errorf("attempt %d: %s decided by our time limit: %s", attempt, e, d.Reason)
			case wantRetry == 0 && (d.Reason != evs.ReasonTimeout || d.Checks.SMTP.Detail != batch.DetailSession):
				t.Errorf("last attempt: %s %s %+v, want timeout with the session detail", e, d.Reason, d.Checks.SMTP)
			}
		}
	}
}
