package main_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/miekg/dns"

	"github.com/evs-dev/evs/internal/app"
	"github.com/evs-dev/evs/internal/testkit"
)

// selfCheckValues reads the self-check's EMF lines in logs (from byte
// offset from): the last value of each metric, by "metric egress list".
func selfCheckValues(logs string, from int) map[string]float64 {
	got := map[string]float64{}
	for _, line := range strings.Split(logs[from:], "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["_aws"] == nil {
			continue
		}
		for _, name := range []string{app.EgressListed, app.EgressHELOConfirmed} {
			if v, ok := rec[name].(float64); ok {
				list, _ := rec["list"].(string)
				got[strings.TrimSpace(fmt.Sprintf("%s %v %s", name, rec["egress"], list))] = v
			}
		}
	}
	return got
}

// lastSelfCheck is the time of the last self-check's EMF line in logs,
// as the process wrote it.
func lastSelfCheck(t *testing.T, logs string) time.Time {
	t.Helper()
	var last int64
	for _, line := range strings.Split(logs, "\n") {
		var rec struct {
			AWS *struct{ Timestamp int64 } `json:"_aws"`
			// A self-check line holds evs_egress_listed or
			// evs_egress_helo_confirmed.
			Listed *float64 `json:"evs_egress_listed"`
			HELO   *float64 `json:"evs_egress_helo_confirmed"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.AWS != nil && (rec.Listed != nil || rec.HELO != nil) {
			last = max(last, rec.AWS.Timestamp)
		}
	}
	if last == 0 {
		t.Fatal("no self-check line in the log")
	}
	return time.UnixMilli(last)
}

// TestLambdaWorkerSelfCheck runs the real worker binary with two SOCKS
// exits, each with its #egress-ip, and the loopback DNS server holding a
// blocklist zone and the HELO name's records. At cold start the worker
// checks both exits: clean, HELO confirmed. Then one exit's address is
// listed and the other's PTR goes away, and the hourly schedule's message
// (an SQS record {"kind":"selfcheck"}, as EventBridge sends it) makes the
// worker emit what changed, as the EMF metrics the alarms watch, and warn.
func TestLambdaWorkerSelfCheck(t *testing.T) {
	const exitA, exitB = "127.0.0.41", "127.0.0.42"
	d := testkit.StartDNS(t)
	d.AddRecord("probe.evs.test. 300 IN A " + exitA)
	d.AddRecord("probe.evs.test. 300 IN A " + exitB)
	for _, ip := range []string{exitA, exitB} {
		ptr, _ := dns.ReverseAddr(ip)
		d.AddRecord(ptr + " 300 IN PTR probe.evs.test.")
	}
	w := newAWSWorld(t)
	// The exits are never dialled: the self-check asks DNS only. They are
	// named by their hosts, 127.0.0.1 and 127.0.0.2.
	rt, logs, _ := w.runLogged(t, build(t, "worker"),
		"EVS_SMTP_PROXY=socks5://127.0.0.1:9#"+exitA+",socks5://127.0.0.2:9#"+exitB,
		"EVS_EGRESS_ALLOW=127.0.0.0/8",
		"EVS_DNS_SERVERS="+d.Addr,
		"EVS_BLOCKLISTS=bl.test",
		"EVS_SMTP_HELO=probe.evs.test",
	)
	phases := []struct {
		name   string
		change func()
		want   map[string]float64
	}{
		{"at cold start", nil, map[string]float64{
			"evs_egress_listed 127.0.0.1 bl.test": 0, "evs_egress_helo_confirmed 127.0.0.1": 1,
			"evs_egress_listed 127.0.0.2 bl.test": 0, "evs_egress_helo_confirmed 127.0.0.2": 1,
		}},
		{"on the schedule's message", func() {
			d.AddRecord("41.0.0.127.bl.test. 300 IN A 127.0.0.2")
			ptr, _ := dns.ReverseAddr(exitB)
			d.SetRcode(ptr, dns.RcodeNameError)
		}, map[string]float64{
			"evs_egress_listed 127.0.0.1 bl.test": 1, "evs_egress_helo_confirmed 127.0.0.1": 1,
			"evs_egress_listed 127.0.0.2 bl.test": 0, "evs_egress_helo_confirmed 127.0.0.2": 0,
		}},
	}
	// schedule sends the schedule's message, as EventBridge does each hour.
	schedule := func(phase string) {
		ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m-selfcheck", Body: `{"kind":"selfcheck"}`, EventSource: "aws:sqs"}}}
		out, err := rt.Invoke(ev, 60*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r events.SQSEventResponse
		if err := json.Unmarshal(out.Response, &r); err != nil || len(r.BatchItemFailures) > 0 {
			t.Fatalf("%s: worker: %s %s", phase, out.Response, out.Error)
		}
	}
	from := 0
	for _, p := range phases {
		var got map[string]float64
		metrics := func() error {
			if got = selfCheckValues(logs.String(), from); len(got) == len(p.want) {
				return nil
			}
			return fmt.Errorf("%s: the self-check's %d metrics, emitted: %v", p.name, len(p.want), got)
		}
		if p.change == nil {
			// The cold start's check, as the worker writes its lines.
			logs.Await(t, 30*time.Second, p.name+": the self-check's "+fmt.Sprint(len(p.want))+" metrics", func(string) bool { return metrics() == nil })
		} else {
			p.change()
			from = len(logs.String())
			// A message that comes while a check runs (the cold
			// start's may still be finishing after its last line) is
			// taken without a second check: the next message checks.
			testkit.EventuallyEvery(t, 30*time.Second, time.Second, func() error {
				if err := metrics(); err == nil {
					return nil
				}
				schedule(p.name)
				return metrics()
			})
		}
		for k, v := range p.want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s: %s = %v (emitted: %v), want %v", p.name, k, g, ok, v)
			}
		}
		if len(got) != len(p.want) {
			t.Errorf("%s: emitted %v, want %v", p.name, got, p.want)
		}
	}
	for _, want := range []string{
		`"the egress address is on a DNS blocklist: receivers will refuse our probes (unknown/blocked)"`,
		`"the HELO name fails the checks receivers make: set EVS_SMTP_HELO`,
	} {
		if !strings.Contains(logs.String()[from:], want) {
			t.Errorf("no warning %s after the listing", want)
		}
	}
}
