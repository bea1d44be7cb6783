package server_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
)

func TestCallbackURLValidated(t *testing.T) {
	h := start(t, options{realClock: true})
	long := "https://hooks.example.com/" + strings.Repeat("a", 2048)
	for _, c := range []struct {
		name string
		r    req
		want int
	}{
		{"http outside the allow-list", req{method: "POST", path: "/v1/requests", body: `{"emails":["a@x.example"],"callbackUrl":"http://hooks.example.com/x"}`}, 400},
		{"userinfo", req{method: "POST", path: "/v1/requests", body: `{"emails":["a@x.example"],"callbackUrl":"https://u:p@hooks.example.com/x"}`}, 400},
		{"too long", req{method: "POST", path: "/v1/requests", body: `{"emails":["a@x.example"],"callbackUrl":"` + long + `"}`}, 400},
		{"metadata address", req{method: "POST", path: "/v1/requests", body: `{"emails":["a@x.example"],"callbackUrl":"https://169.254.169.254/"}`}, 400},
		{"not a URL", req{method: "POST", path: "/v1/requests", body: `{"emails":["a@x.example"],"callbackUrl":"hooks"}`}, 400},
		{"empty", req{method: "POST", path: "/v1/requests", body: `{"emails":["a@x.example"],"callbackUrl":""}`}, 400},
		{"not a string", req{method: "POST", path: "/v1/requests", body: `{"emails":["a@x.example"],"callbackUrl":5}`}, 400},
		{"JSON body with query", req{method: "POST", path: "/v1/requests?callbackUrl=https%3A%2F%2Fh.example%2F", body: `{"emails":["a@x.example"]}`}, 400},
		{"CSV bad query", req{method: "POST", path: "/v1/requests?callbackUrl=ftp%3A%2F%2Fh.example%2F", body: "a@x.example\n", headers: map[string]string{"Content-Type": "text/csv"}}, 400},
		{"https", req{method: "POST", path: "/v1/requests", body: `{"emails":["a@x.example"],"callbackUrl":"https://hooks.example.com/evs"}`}, 201},
		{"http to loopback inside the allow-list", req{method: "POST", path: "/v1/requests", body: `{"emails":["a@x.example"],"callbackUrl":"http://127.0.0.1:9/evs"}`}, 201},
		{"CSV with query", req{method: "POST", path: "/v1/requests?callbackUrl=" + url.QueryEscape("https://hooks.example.com/evs?a=1"), body: "a@x.example\n", headers: map[string]string{"Content-Type": "text/csv"}}, 201},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.r.key = h.testKey
			r := h.do(c.r)
			if r.status != c.want {
				t.Fatalf("status %d, want %d: %s", r.status, c.want, r.body)
			}
			if c.want == 400 && r.errorCode(t) != "invalid_request" {
				t.Fatalf("code %s", r.errorCode(t))
			}
		})
	}
}

// A final batch's event, delivered and signed (completed, cancelled,
// retried until 2xx), is the behaviour suite's, on both deployments
// (internal/app, TestSuiteWebhook).

// blackHole is a loopback listener that accepts connections and never
// answers; it counts the connections it accepted.
func blackHole(t *testing.T) (url string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = &atomic.Int64{}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String() + "/hook", accepted
}

// TestWebhookFairness: an account with 150 finished batches whose callback
// never answers (each attempt holds its slot for the whole 10 s timeout)
// does not delay another account's event: its first attempt overtakes the
// hog's attempts still waiting for a slot, reaching its receiver while
// most of the hog's 150 first attempts have not been made (issue 24; one
// pool taken in arrival order made it wait behind all of them, about a
// minute).
func TestWebhookFairness(t *testing.T) {
	h := start(t, options{realClock: true})
	hole, accepted := blackHole(t)
	_, hogKey := h.account("hog", true)
	var hogs []string
	for i := range 150 {
		r := h.do(req{method: "POST", path: "/v1/requests", key: hogKey,
			body: fmt.Sprintf(`{"emails":["accepted_email%d@x.example"],"callbackUrl":%q}`, i, hole)})
		if r.status != 201 {
			t.Fatalf("hog batch %d: %d %s", i, r.status, r.body)
		}
		hogs = append(hogs, decodeEnvelope(t, r).Request.ID)
	}
	for _, id := range hogs {
		h.poll(hogKey, id, 30*time.Second)
	}
	// The hog's attempts are under way: its receiver holds them.
	testkit.Eventually(t, 10*time.Second, testkit.Until(func() bool { return accepted.Load() > 0 }, "no attempt reached the black hole"))

	// arrived gets, at the other account's first attempt, how many of the
	// hog's attempts the black hole had taken by then.
	type arrival struct {
		hogAttempts int64
		at          time.Time
	}
	arrived := make(chan arrival, 1)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- arrival{accepted.Load(), time.Now()}:
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rc.Close()
	r := h.do(req{method: "POST", path: "/v1/requests", key: h.otherKey,
		body: `{"emails":["accepted_email@x.example"],"callbackUrl":"` + rc.URL + `/in"}`})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	e := h.poll(h.otherKey, decodeEnvelope(t, r).Request.ID, 10*time.Second)
	completed, err := time.Parse(time.RFC3339Nano, e.Request.CompletedAt)
	if err != nil {
		t.Fatalf("completedAt %q: %v", e.Request.CompletedAt, err)
	}
	a := testkit.Receive(t, arrived, 30*time.Second, fmt.Sprintf("the other account's first attempt beside the hog (%d black-holed attempts)", accepted.Load()))
	hogAttempts := a.hogAttempts
	t.Logf("first attempt %v after completion, after %d of the hog's black-holed attempts", a.at.Sub(completed), hogAttempts)
	// In arrival order it would have come after the hog's 150 first
	// attempts, less the slots (16) free at the end.
	if hogAttempts >= int64(len(hogs))/2 {
		t.Errorf("the other account's first attempt came after %d of the hog's attempts: it waited behind them", hogAttempts)
	}
}
