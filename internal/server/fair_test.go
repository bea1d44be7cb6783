package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/batch"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/testkit"
)

// silentPeer starts a receiving server on 127.0.0.2 (the harness's SMTP
// port) that accepts TCP and never says a word, as mx.hog.example, and
// gives n domains hog0.example… that use it.
func (h *harness) silentPeer(n int) *testkit.SMTPServer {
	h.t.Helper()
	peer := testkit.StartSMTP(h.t, testkit.SMTPOptions{IP: "127.0.0.2", Port: h.smtp.Port, Silent: true})
	h.dns.AddRecord("mx.hog.example. 300 IN A 127.0.0.2")
	for i := range n {
		h.dns.AddRecord(fmt.Sprintf("hog%d.example. 300 IN MX 10 mx.hog.example.", i))
	}
	return peer
}

// hogBatch creates a live batch of addresses on the silent peer's domains.
func (h *harness) hogBatch(key string, domains int) string {
	h.t.Helper()
	var emails []string
	for i := range domains {
		emails = append(emails, fmt.Sprintf("a%d@hog%d.example", i, i), fmt.Sprintf("b%d@hog%d.example", i, i))
	}
	r := h.do(req{method: "POST", path: "/v1/requests", key: key, body: `{"emails":` + emailsJSON(emails) + `}`})
	if r.status != 201 {
		h.t.Fatalf("create hog batch: %d %s", r.status, r.body)
	}
	return decodeEnvelope(h.t, r).Request.ID
}

// timeBatch creates a batch and returns how long it took to complete.
func (h *harness) timeBatch(key string, emails []string, limit time.Duration) (time.Duration, envelope) {
	h.t.Helper()
	start := time.Now()
	r := h.do(req{method: "POST", path: "/v1/requests", key: key, body: `{"emails":` + emailsJSON(emails) + `}`})
	if r.status != 201 {
		h.t.Fatalf("create: %d %s", r.status, r.body)
	}
	e := h.poll(key, decodeEnvelope(h.t, r).Request.ID, limit)
	return time.Since(start), e
}

// TestFairnessHog: one account with four batches against a receiving
// server that never answers (its sessions end only at the 2 min reply
// timeout) does not delay another account's test-mode batch, a sync
// /v1/verify, nor another live account's small batch (contract, section
// 9): each completes while every one of the hog's sessions is still open
// and silent, so none of them waited for a hog's slot.
func TestFairnessHog(t *testing.T) {
	h := start(t, options{realClock: true, replyTimeout: 2 * time.Minute})
	silent := h.silentPeer(40)
	_, hogKey := h.account("hog", false)
	var hogs []string
	for range 4 {
		hogs = append(hogs, h.hogBatch(hogKey, 40))
	}
	// The hog has taken every slot it may: its sessions are open and
	// silent, as many as the provider's limit (ProviderSessions "*": 4).
	const hogSessions = 4
	testkit.Eventually(t, 20*time.Second, func() error {
		if n := silent.Active(); n < hogSessions {
			return fmt.Errorf("the hog holds %d sessions, want %d", n, hogSessions)
		}
		return nil
	})
	// stillStuck fails the test unless the hog's sessions are the same
	// ones, still open, and its batches have nothing processed.
	stillStuck := func(after string) {
		t.Helper()
		if a, c := silent.Active(), silent.Connections(); a != hogSessions || c != hogSessions {
			t.Fatalf("after %s: the silent peer has %d sessions open of %d accepted; want the hog's %d, all still open", after, a, c, hogSessions)
		}
		for _, id := range hogs {
			e := decodeEnvelope(t, h.do(req{path: "/v1/requests/" + id, key: hogKey}))
			if e.Request.State != "running" || e.Counters.Processed != 0 {
				t.Fatalf("after %s: the hog's batch is %s with %+v; the test needs it stuck", after, e.Request.State, e.Counters)
			}
		}
	}

	d, e := h.timeBatch(h.testKey, []string{"accepted_email@x.example", "rejected_email@x.example", "mailbox_full@x.example"}, 30*time.Second)
	if e.Request.State != "completed" || e.Counters.Processed != 3 {
		t.Fatalf("test-mode batch: %s %+v", e.Request.State, e.Counters)
	}
	t.Logf("test-mode batch completed in %v beside the hog", d)
	stillStuck("the test-mode batch")

	start := time.Now()
	r := h.do(req{method: "POST", path: "/v1/verify", key: h.liveKey, body: `{"email":"alice@good.example","mode":"full"}`})
	if r.status != 200 {
		t.Fatalf("sync verify beside the hog: %d: %s", r.status, r.body)
	}
	if m := r.json(t); m["status"] != "deliverable" {
		t.Fatalf("sync verify: %s", r.body)
	}
	t.Logf("sync verify answered in %v beside the hog", time.Since(start))
	stillStuck("the sync verify")

	d, e = h.timeBatch(h.liveKey, []string{"alice@good.example", "bob@good.example", "carol@good.example"}, 30*time.Second)
	if e.Request.State != "completed" || e.Counters.Deliverable != 2 || e.Counters.Undeliverable != 1 {
		t.Fatalf("live batch: %s %+v", e.Request.State, e.Counters)
	}
	t.Logf("another live account's batch completed in %v beside the hog", d)
	stillStuck("the other live batch")
}

// TestActiveBatchLimit: an account's 11th batch queued or running is 429
// rate_limited with Retry-After; the refusal is not kept under its
// Idempotency-Key, and a finished batch frees a place.
func TestActiveBatchLimit(t *testing.T) {
	h := start(t, options{realClock: true, replyTimeout: 2 * time.Minute, maxActive: 10})
	h.silentPeer(1)
	var ids []string
	for range 10 {
		ids = append(ids, h.hogBatch(h.liveKey, 1))
	}
	create := func(key string) reply {
		return h.do(req{method: "POST", path: "/v1/requests", key: key, body: `{"emails":["alice@good.example"]}`,
			headers: map[string]string{"Idempotency-Key": "eleventh-" + key[len(key)-6:]}})
	}
	r := create(h.liveKey)
	if r.status != 429 || r.errorCode(t) != "rate_limited" {
		t.Fatalf("11th batch: %d %s", r.status, r.body)
	}
	if ra := r.header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("11th batch without Retry-After: %v", r.header)
	}
	// Another account is not limited by this one.
	if r := create(h.testKey); r.status != 201 {
		t.Fatalf("other account: %d %s", r.status, r.body)
	}
	if r := h.do(req{method: "POST", path: "/v1/requests/" + ids[0] + "/cancel", key: h.liveKey}); r.status != 200 {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	// The same key again: a new attempt, not a replay of the 429.
	r = create(h.liveKey)
	if r.status != 201 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("after a cancel: %d %v %s", r.status, r.header, r.body)
	}
	if r := create(h.liveKey); r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay of the created batch: %d %s", r.status, r.body)
	}
	n, err := h.st.ActiveBatches(context.Background(), h.liveAcct)
	if err != nil || n > 10 {
		t.Fatalf("active batches %d, %v", n, err)
	}
}

// TestBatchDeadline: a batch not finished when EVS_BATCH_DEADLINE has
// passed completes, with what is left as unknown/timeout.
func TestBatchDeadline(t *testing.T) {
	const deadline = 1500 * time.Millisecond
	h := start(t, options{realClock: true, replyTimeout: 2 * time.Minute, deadline: deadline})
	h.silentPeer(2)
	_, e := h.timeBatch(h.liveKey, []string{"alice@good.example", "a@hog0.example", "b@hog1.example"}, 30*time.Second)
	if e.Request.State != "completed" || e.Counters.Deliverable != 1 || e.Counters.Unknown != 2 {
		t.Fatalf("%s %+v", e.Request.State, e.Counters)
	}
	// The server's own record: completed no earlier than its deadline.
	created, err1 := time.Parse(time.RFC3339Nano, e.Request.CreatedAt)
	completed, err2 := time.Parse(time.RFC3339Nano, e.Request.CompletedAt)
	if err1 != nil || err2 != nil {
		t.Fatalf("timestamps %q %q: %v %v", e.Request.CreatedAt, e.Request.CompletedAt, err1, err2)
	}
	if completed.Before(created.Add(deadline)) {
		t.Fatalf("created %s, completed %s: before its deadline of %v", e.Request.CreatedAt, e.Request.CompletedAt, deadline)
	}
	r := h.do(req{path: "/v1/requests/" + e.Request.ID + "/results", key: h.liveKey})
	for _, res := range r.json(t)["results"].([]any) {
		m := res.(map[string]any)
		if !strings.Contains(m["email"].(string), "@hog") {
			continue
		}
		dec := m["decision"].(map[string]any)
		smtp := dec["checks"].(map[string]any)["smtp"].(map[string]any)
		if m["status"] != "unknown" || dec["reason"] != "timeout" || smtp["result"] != "timeout" || !strings.Contains(smtp["detail"].(string), "deadline") {
			t.Fatalf("deadline result: %v", m)
		}
	}
}

// TestStoreFaultRecovery: the store fails in the middle of a batch; once it
// answers again the batch completes with exact counters, without a restart.
func TestStoreFaultRecovery(t *testing.T) {
	fs := &testkit.FaultyStore{}
	var held atomic.Int64
	rcpt := func(addr string) string {
		if held.Add(1) == 20 {
			fs.Down.Store(true) // the disk fills up mid-batch
		}
		if strings.HasPrefix(addr, "alice") {
			return "250 2.1.5 OK"
		}
		return "550 5.1.1 user unknown"
	}
	h := start(t, options{realClock: true, rcpt: rcpt, wrapStore: func(s server.Store) server.Store { fs.EmbeddedStore = s; return fs },
		worker: batch.Worker{RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, Processor: &batch.Processor{PerConnection: 5}}})
	var emails []string
	for i := range 60 {
		emails = append(emails, fmt.Sprintf("alice%d@good.example", i))
	}
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.liveKey, body: `{"emails":` + emailsJSON(emails) + `}`})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decodeEnvelope(t, r).Request.ID
	// The store refuses three calls, then more of the retries that follow
	// (20 ms back-offs growing to 200 ms): the batch waits them out.
	testkit.Eventually(t, 10*time.Second, testkit.Until(func() bool { return fs.Fails.Load() >= 3 }, "the store never failed"))
	testkit.Eventually(t, 10*time.Second, testkit.Until(func() bool { return fs.Fails.Load() >= 8 }, "the store refused fewer than 8 calls: no retry while it is down"))
	if e := decodeEnvelope(t, h.do(req{path: "/v1/requests/" + id, key: h.liveKey})); e.Request.State != "running" {
		t.Fatalf("while the store is down: %s", e.Request.State)
	}
	fs.Down.Store(false)
	e := h.poll(h.liveKey, id, 10*time.Second)
	if e.Request.State != "completed" || e.Counters.Processed != 60 || e.Counters.Deliverable != 60 {
		t.Fatalf("after recovery: %s %+v", e.Request.State, e.Counters)
	}
}
