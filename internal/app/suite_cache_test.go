package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// suiteRcpt accepts ok* addresses and rejects the rest (the accept-all
// probe's random address too).
func suiteRcpt(addr string) string {
	if strings.HasPrefix(addr, "ok") {
		return "250 2.1.5 OK"
	}
	return "550 5.1.1 <" + addr + ">: User unknown"
}

// rcpts counts the RCPT TO commands the SMTP peer got, by address.
func (p peers) rcpts() map[string]int {
	n := map[string]int{}
	for _, c := range p.smtp.Commands() {
		if a, ok := strings.CutPrefix(c, "RCPT TO:<"); ok {
			n[strings.TrimSuffix(a, ">")]++
		}
	}
	return n
}

// verifyAddr is POST /v1/verify in full mode (extra: more fields) and
// returns the reply's decision.
func (s *suite) verifyAddr(t *testing.T, key, email, extra string) map[string]any {
	t.Helper()
	r := s.do(t, key, httpCall{method: http.MethodPost, path: "/v1/verify", body: `{"email":"` + email + `","mode":"full"` + extra + `}`})
	if r.status != http.StatusOK {
		t.Fatalf("verify %s: %d %s", email, r.status, r.body)
	}
	var m struct {
		Decision map[string]any `json:"decision"`
	}
	if err := json.Unmarshal(r.body, &m); err != nil || m.Decision == nil {
		t.Fatalf("verify %s: %v %s", email, err, r.body)
	}
	return m.Decision
}

// fullBatch runs a full-mode batch of emails (extra: more fields of the
// request) until it is final, requires it completed, and returns its
// decisions by address.
func (s *suite) fullBatch(t *testing.T, key string, emails []string, extra string) map[string]map[string]any {
	t.Helper()
	list, _ := json.Marshal(emails)
	id, _ := s.create(t, key, `{"emails":`+string(list)+`,"mode":"full"`+extra+`}`)
	if e := s.final(t, key, id); e.Request.State != "completed" {
		t.Fatalf("batch %s: %+v", id, e.Request)
	}
	got := s.results(t, key, id)
	if len(got) != len(emails) {
		t.Fatalf("batch %s: %d results, want %d", id, len(got), len(emails))
	}
	return got
}

// TestSuiteCacheReuse: a live account's verdicts are reused by its
// later batches and calls of /v1/verify, on both deployments. A full-mode
// batch probes every address; the same addresses again open no SMTP
// connection and come back cached, equal to the first results but for
// cached and durationMs (checkedAt, reason and score are the first
// verdict's); /v1/verify reuses a batch's verdict. With maxAge 0 a batch
// probes every address again (each is asked twice in all), and then a
// maxAge older than those verdicts reuses them; /v1/verify reuses within
// maxAge and probes again with maxAge 0.
func TestSuiteCacheReuse(t *testing.T) {
	t.Parallel()
	forEachDeployment(t, suiteOptions{rcpt: suiteRcpt}, func(t *testing.T, s *suite) {
		_, key := s.account(t, false)
		var emails []string
		for i := range 40 {
			emails = append(emails, fmt.Sprintf("ok%d@good.example", i), fmt.Sprintf("no%d@other.example", i))
		}

		first := s.fullBatch(t, key, emails, "")
		conns := s.smtp.Connections()
		if conns == 0 {
			t.Fatal("the first batch opened no SMTP connection")
		}
		for e, d := range first {
			if d["cached"] != false {
				t.Fatalf("first batch: %s cached: %v", e, d)
			}
		}

		second := s.fullBatch(t, key, emails, "")
		if got := s.smtp.Connections(); got != conns {
			t.Fatalf("the second batch opened %d SMTP connections, want 0", got-conns)
		}
		for e, d := range second {
			if d["cached"] != true {
				t.Fatalf("second batch: %s not reused: %v", e, d)
			}
			if d["checkedAt"] != first[e]["checkedAt"] || d["reason"] != first[e]["reason"] {
				t.Fatalf("second batch: %s checkedAt/reason %v/%v, first %v/%v", e, d["checkedAt"], d["reason"], first[e]["checkedAt"], first[e]["reason"])
			}
			a, b := withoutVolatile(first[e]), withoutVolatile(d)
			if !bytes.Equal(a, b) {
				t.Fatalf("%s: reused result differs:\n%s\n%s", e, a, b)
			}
		}
		if d := s.verifyAddr(t, key, emails[0], ""); d["cached"] != true || d["checkedAt"] != first[emails[0]]["checkedAt"] {
			t.Fatalf("a batch's verdict is not reused by /v1/verify: %v", d)
		}
		if s.smtp.Connections() != conns {
			t.Fatal("/v1/verify probed an address the batch verified")
		}

		// maxAge 0 reuses nothing.
		for e, d := range s.fullBatch(t, key, emails, `,"maxAge":0`) {
			if d["cached"] != false {
				t.Fatalf("maxAge 0: %s reused: %v", e, d)
			}
		}
		if s.smtp.Connections() == conns {
			t.Fatal("maxAge 0: the batch opened no SMTP connection")
		}
		asked := s.rcpts()
		for _, e := range emails {
			if asked[e] != 2 {
				t.Errorf("%s asked %d times, want 2 (the first batch, and the one with maxAge 0)", e, asked[e])
			}
		}

		// A bound older than the verdicts (refreshed just now) reuses them.
		conns = s.smtp.Connections()
		for e, d := range s.fullBatch(t, key, emails, `,"maxAge":86400`) {
			if d["cached"] != true {
				t.Fatalf("maxAge 86400: %s not reused: %v", e, d)
			}
		}
		if s.smtp.Connections() != conns {
			t.Fatal("maxAge 86400: the batch probed again")
		}

		// /v1/verify: within maxAge, reused; maxAge 0, probed again.
		if d := s.verifyAddr(t, key, emails[1], `,"maxAge":3600`); d["cached"] != true {
			t.Fatalf("/v1/verify maxAge 3600: not reused: %v", d)
		}
		if s.smtp.Connections() != conns {
			t.Fatal("/v1/verify maxAge 3600: probed")
		}
		if d := s.verifyAddr(t, key, emails[1], `,"maxAge":0`); d["cached"] != false || d["reason"] != first[emails[1]]["reason"] {
			t.Fatalf("/v1/verify maxAge 0: %v", d)
		}
		if s.smtp.Connections() == conns {
			t.Fatal("/v1/verify maxAge 0: no SMTP connection")
		}
	})
}

// withoutVolatile is a decision without the fields a reuse changes
// (cached, durationMs), encoded.
func withoutVolatile(d map[string]any) []byte {
	c := map[string]any{}
	for k, v := range d {
		if k != "cached" && k != "durationMs" {
			c[k] = v
		}
	}
	b, _ := json.Marshal(c)
	return b
}
