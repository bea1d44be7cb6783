package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestBatchStateLog: every state a batch takes is one log line (contract,
// section 15), whoever made the change: the API (created, cancelled), the
// batch worker (running, completed). The lines carry ids, states and
// counts, never an address.
func TestBatchStateLog(t *testing.T) {
	h := start(t, options{realClock: true,
		// held@ is greylisted, and its retry an hour away: its batch stays
		// running until it is cancelled.
		rcpt: func(addr string) string {
			if addr == "held@good.example" {
				return greylistReply
			}
			return "550 5.1.1 <" + addr + ">: Recipient address rejected: User unknown"
		},
		worker: batch.Worker{GreyBackoff: time.Hour}})
	done := h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":["secret-alice@good.example","team+rejected_email@good.example"],"mode":"full"}`})
	if done.status != 201 {
		t.Fatalf("create: %d %s", done.status, done.body)
	}
	doneID := decodeEnvelope(t, done).Request.ID
	h.poll(h.testKey, doneID, 10*time.Second)

	held := h.do(req{method: "POST", path: "/v1/requests", key: h.liveKey, body: `{"emails":["held@good.example"],"mode":"full"}`})
	if held.status != 201 {
		t.Fatalf("create: %d %s", held.status, held.body)
	}
	heldID := decodeEnvelope(t, held).Request.ID
	testkit.Eventually(t, 10*time.Second, func() error {
		if s := decodeEnvelope(t, h.do(req{path: "/v1/requests/" + heldID, key: h.liveKey})).Request.State; s != "running" {
			return fmt.Errorf("the held batch is %s, not running", s)
		}
		return nil
	})
	if r := h.do(req{method: "POST", path: "/v1/requests/" + heldID + "/cancel", key: h.liveKey}); r.status != 200 {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	h.stop()

	got := map[string][]string{}
	for _, line := range strings.Split(h.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["msg"] != "batch" {
			continue
		}
		if strings.Contains(line, "@") {
			t.Errorf("a batch line holds an address: %s", line)
		}
		id, _ := m["batchId"].(string)
		from, _ := m["from"].(string)
		to, _ := m["to"].(string)
		got[id] = append(got[id], from+">"+to)
		if m["accountId"] == "" || m["total"] == nil {
			t.Errorf("batch line without account or counts: %s", line)
		}
	}
	if want := ">queued queued>running running>completed"; strings.Join(got[doneID], " ") != want {
		t.Errorf("finished batch: %v, want %s", got[doneID], want)
	}
	if want := ">queued queued>running running>cancelled"; strings.Join(got[heldID], " ") != want {
		t.Errorf("cancelled batch: %v, want %s", got[heldID], want)
	}
}

// TestBatchProgressLog: a running batch logs its progress once for each
// tenth of its addresses it passes (at most nine lines, whatever its
// size), between its running and completed lines.
func TestBatchProgressLog(t *testing.T) {
	// Ten domains on the loopback mail host, four sessions at a time; the
	// last domain's RCPTs are held until the batch has logged its progress
	// through the other nine (90 of 100), so the results are written over
	// several rounds and the last of them after that progress.
	progressed := make(chan struct{})
	var progressOnce sync.Once
	letGo := func() { progressOnce.Do(func() { close(progressed) }) }
	t.Cleanup(letGo)
	h := start(t, options{realClock: true, replyTimeout: time.Minute, rcpt: func(addr string) string {
		if strings.HasSuffix(addr, "@d9.example") {
			<-progressed
		}
		if strings.HasPrefix(addr, "u") {
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 <" + addr + ">: Recipient address rejected: User unknown"
	}})
	var emails []string
	for d := range 10 {
		h.dns.AddRecord(fmt.Sprintf("d%d.example. 300 IN MX 10 mx1.good.example.", d))
		for i := range 10 {
			emails = append(emails, fmt.Sprintf("u%d@d%d.example", i, d))
		}
	}
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.liveKey, body: `{"emails":` + emailsJSON(emails) + `,"mode":"full"}`})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decodeEnvelope(t, r).Request.ID
	testkit.Eventually(t, 20*time.Second, testkit.Until(func() bool {
		for _, line := range strings.Split(h.logs.String(), "\n") {
			if strings.Contains(line, `"msg":"batch progress"`) && strings.Contains(line, `"processed":90}`) {
				return true
			}
		}
		return false
	}, "no progress line at 90 of 100 with the last domain held"))
	letGo()
	if e := h.poll(h.liveKey, id, 20*time.Second); e.Counters.Processed != 100 {
		t.Fatalf("final: %+v", e.Counters)
	}
	h.stop()

	var seq []string
	last := 0
	for _, line := range strings.Split(h.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["batchId"] != id {
			continue
		}
		if strings.Contains(line, "@") {
			t.Errorf("a batch line holds an address: %s", line)
		}
		switch m["msg"] {
		case "batch":
			seq = append(seq, m["to"].(string))
		case "batch progress":
			p := int(m["processed"].(float64))
			if p <= last || p/10 <= last/10 || p >= 100 {
				t.Errorf("progress %d after %d: not a new tenth", p, last)
			}
			last = p
			seq = append(seq, "progress")
		}
	}
	joined := strings.Join(seq, " ")
	if !strings.HasPrefix(joined, "queued running progress") || !strings.HasSuffix(joined, "progress completed") || strings.Count(joined, "progress") > 9 {
		t.Fatalf("lines: %s; want queued, running, 1-9 progress lines, completed", joined)
	}
}
