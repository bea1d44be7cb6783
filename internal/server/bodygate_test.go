package server_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestLargeBodiesShareABudget: with a budget of one 6 MiB body, a client
// that is sending one holds the budget; another account's large batch body
// is then answered 503 unavailable with Retry-After once its wait runs
// out, without being read, and so is its batch from a large upload, while
// /v1/verify and a small batch body never wait.
// Once the first body has arrived and been answered, large bodies are
// admitted again.
func TestLargeBodiesShareABudget(t *testing.T) {
	h := start(t, options{server: func(o *server.Options) {
		o.BodyBudget = api.MaxBatchBody
		o.BodyWait = 300 * time.Millisecond
		o.BodyTimeout = 20 * time.Second
	}})
	full := padded(api.MaxBatchBody)
	large := padded(server.SmallBody + 1)

	// The headers and the first kilobyte of a 6 MiB body; the rest waits.
	c := h.dialFrom(t, "")
	defer c.Close()
	head := "POST /v1/requests HTTP/1.1\r\nHost: evs\r\nContent-Type: application/json\r\nX-Api-Key: " + h.testKey +
		"\r\nContent-Length: " + strconv.Itoa(len(full)) + "\r\n\r\n"
	if _, err := io.WriteString(c, head+full[:1024]); err != nil {
		t.Fatal(err)
	}
	// The held body is admitted as soon as the server has read its
	// headers; until then a large body may still go through.
	var busy reply
	testkit.Eventually(t, 20*time.Second, func() error {
		if busy = h.do(req{method: http.MethodPost, path: "/v1/requests", key: h.otherKey, body: large}); busy.status == http.StatusCreated {
			return fmt.Errorf("a large body still goes through: the server has not read the held body's headers")
		}
		return nil
	})
	if busy.status != http.StatusServiceUnavailable || busy.errorCode(t) != "unavailable" || busy.header.Get("Retry-After") != "5" {
		t.Fatalf("large body while the budget is held: %d %v %s", busy.status, busy.header, busy.body)
	}
	if r := h.do(req{method: http.MethodPost, path: "/v1/verify", key: h.testKey, body: `{"email":"alice@x.example","mode":"quick"}`}); r.status != http.StatusOK {
		t.Fatalf("verify while the budget is held: %d %s", r.status, r.body)
	}
	if r := h.do(req{method: http.MethodPost, path: "/v1/requests", key: h.testKey, body: padded(server.SmallBody)}); r.status != http.StatusCreated {
		t.Fatalf("small batch body while the budget is held: %d %s", r.status, r.body)
	}
	// A list read from an upload takes from the same budget: its PUT is
	// streamed and goes through, the batch's creation is turned away.
	id, putURL := h.newUpload(h.otherKey, "text/csv")
	list := strings.Repeat("alice@x.example\n", server.SmallBody/16+1)
	if r := h.put(putURL, "text/csv", strings.NewReader(list)); r.status != http.StatusOK {
		t.Fatalf("upload PUT while the budget is held: %d %s", r.status, r.body)
	}
	fromUpload := req{method: http.MethodPost, path: "/v1/requests", key: h.otherKey, body: `{"uploadId":"` + id + `"}`}
	if r := h.do(fromUpload); r.status != http.StatusServiceUnavailable || r.errorCode(t) != "unavailable" || r.header.Get("Retry-After") != "5" {
		t.Fatalf("batch from a large upload while the budget is held: %d %v %s", r.status, r.header, r.body)
	}

	// The rest of the held body: it is served, and gives the budget back.
	if _, err := io.WriteString(c, full[1024:]); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("the held body: %d", resp.StatusCode)
	}
	if r := h.do(req{method: http.MethodPost, path: "/v1/requests", key: h.otherKey, body: large}); r.status != http.StatusCreated {
		t.Fatalf("large body after the budget was given back: %d %s", r.status, strings.TrimSpace(string(r.body)))
	}
	if r := h.do(fromUpload); r.status != http.StatusCreated {
		t.Fatalf("batch from the upload after the budget was given back: %d %s", r.status, r.body)
	}
}

// TestAnAccountHoldsHalfTheBodyBudget: with the default budget (two 6 MiB
// bodies), an account sending one 6 MiB body slowly holds its whole share:
// its next large body and its batch from a large upload are answered 429
// rate_limited with Retry-After, unread, while another account's large
// bodies still go through on the other half. Once the held body is
// answered, the account's large bodies are admitted again.
func TestAnAccountHoldsHalfTheBodyBudget(t *testing.T) {
	h := start(t, options{server: func(o *server.Options) {
		o.BodyWait = 300 * time.Millisecond
		o.BodyTimeout = 20 * time.Second
	}})
	full := padded(api.MaxBatchBody)
	large := padded(server.SmallBody + 1)
	id, putURL := h.newUpload(h.testKey, "text/csv")
	list := strings.Repeat("alice@x.example\n", server.SmallBody/16+1)
	if r := h.put(putURL, "text/csv", strings.NewReader(list)); r.status != http.StatusOK {
		t.Fatalf("upload PUT: %d %s", r.status, r.body)
	}

	c := h.dialFrom(t, "")
	defer c.Close()
	head := "POST /v1/requests HTTP/1.1\r\nHost: evs\r\nContent-Type: application/json\r\nX-Api-Key: " + h.testKey +
		"\r\nContent-Length: " + strconv.Itoa(len(full)) + "\r\n\r\n"
	if _, err := io.WriteString(c, head+full[:1024]); err != nil {
		t.Fatal(err)
	}
	var own reply
	testkit.Eventually(t, 20*time.Second, func() error {
		if own = h.do(req{method: http.MethodPost, path: "/v1/requests", key: h.testKey, body: large}); own.status == http.StatusCreated {
			return fmt.Errorf("a large body still goes through: the server has not read the held body's headers")
		}
		return nil
	})
	if own.status != http.StatusTooManyRequests || own.errorCode(t) != "rate_limited" || own.header.Get("Retry-After") != "5" {
		t.Fatalf("the account's second large body: %d %v %s", own.status, own.header, own.body)
	}
	fromUpload := req{method: http.MethodPost, path: "/v1/requests", key: h.testKey, body: `{"uploadId":"` + id + `"}`}
	if r := h.do(fromUpload); r.status != http.StatusTooManyRequests || r.errorCode(t) != "rate_limited" || r.header.Get("Retry-After") != "5" {
		t.Fatalf("the account's batch from a large upload: %d %v %s", r.status, r.header, r.body)
	}
	for i := range 3 {
		if r := h.do(req{method: http.MethodPost, path: "/v1/requests", key: h.otherKey, body: large}); r.status != http.StatusCreated {
			t.Fatalf("another account's large body %d: %d %s", i, r.status, r.body)
		}
	}

	if _, err := io.WriteString(c, full[1024:]); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("the held body: %d", resp.StatusCode)
	}
	if r := h.do(fromUpload); r.status != http.StatusCreated {
		t.Fatalf("the account's batch from the upload once its share is back: %d %s", r.status, r.body)
	}
}
