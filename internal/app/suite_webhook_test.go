package app_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/evs-dev/evs/internal/webhook"
)

// hookReceiver is a loopback webhook receiver: it keeps every attempt's
// body and headers by batch id, and answers each path's attempts with
// the statuses of fail, then 204.
type hookReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	attempts map[string][]hookAttempt // batch id → attempts
	fail     map[string][]int         // path → statuses before 204
}

type hookAttempt struct {
	body   []byte
	header http.Header
}

func startHookReceiver(t *testing.T, fail map[string][]int) *hookReceiver {
	t.Helper()
	h := &hookReceiver{attempts: map[string][]hookAttempt{}, fail: fail}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var ev struct {
			Data struct {
				Request struct{ ID string } `json:"request"`
			} `json:"data"`
		}
		_ = json.Unmarshal(b, &ev)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.attempts[ev.Data.Request.ID] = append(h.attempts[ev.Data.Request.ID], hookAttempt{b, r.Header.Clone()})
		if st := h.fail[r.URL.Path]; len(st) > 0 {
			h.fail[r.URL.Path] = st[1:]
			w.WriteHeader(st[0])
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *hookReceiver) of(id string) []hookAttempt {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookAttempt(nil), h.attempts[id]...)
}

// TestSuiteWebhook: a batch with a callback URL gets its final event,
// signed with the account's secret, on both deployments. A completed and
// a cancelled test-mode batch each get one event of their type; a batch
// whose receiver answers 503 twice gets the same event (one webhook-id)
// until it answers 2xx. A queued batch does not show its callback; the
// envelope of a final one shows the delivery.
func TestSuiteWebhook(t *testing.T) {
	t.Parallel()
	forEachDeployment(t, suiteOptions{}, func(t *testing.T, s *suite) {
		rc := startHookReceiver(t, map[string][]int{"/retry": {503, 503}})
		acct, key := s.account(t, true)
		sec := s.secret(t, acct)
		create := func(emails, path string) string {
			t.Helper()
			id, r := s.create(t, key, `{"emails":`+emails+`,"callbackUrl":"`+rc.URL+path+`"}`)
			if strings.Contains(string(r.body), "callback") {
				t.Fatalf("a queued batch shows its callback: %s", r.body)
			}
			return id
		}
		done := create(`["accepted_email@x.example","mailbox_full@x.example"]`, "/in")
		// Greylisted addresses of test accounts are retried after 1 s, so
		// there is time to cancel this one.
		cancelled := create(`["greylisted@x.example"]`, "/in")
		if r := s.do(t, key, httpCall{method: http.MethodPost, path: "/v1/requests/" + cancelled + "/cancel"}); r.status != http.StatusOK {
			t.Fatalf("cancel: %d %s", r.status, r.body)
		}
		retried := create(`["accepted_email@x.example"]`, "/retry")

		for _, c := range []struct {
			id, typ, path string
			attempts      int
		}{
			{done, "batch.completed", "/in", 1},
			{cancelled, "batch.cancelled", "/in", 1},
			{retried, "batch.completed", "/retry", 3},
		} {
			var e envelope
			eventually(t, time.Minute, c.typ+" "+c.path+" delivered", func() bool {
				e = s.envelopeOf(t, key, c.id)
				return e.Request.Callback != nil && e.Request.Callback.State == "delivered"
			})
			cb := e.Request.Callback
			if cb.Attempts != c.attempts || cb.LastStatus == nil || *cb.LastStatus != http.StatusNoContent || e.Request.CallbackURL != rc.URL+c.path {
				t.Errorf("%s %s: envelope %+v %+v", c.typ, c.path, e.Request, *cb)
			}
			got := rc.of(c.id)
			if len(got) != c.attempts {
				t.Fatalf("%s %s: %d attempts arrived, want %d", c.typ, c.path, len(got), c.attempts)
			}
			wh, err := standardwebhooks.NewWebhook(sec.Current)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range got {
				if !strings.Contains(string(a.body), `"type":"`+c.typ+`"`) {
					t.Errorf("event %s, want type %s", a.body, c.typ)
				}
				if err := wh.Verify(a.body, a.header); err != nil {
					t.Errorf("%s: signature: %v", c.typ, err)
				}
				if a.header.Get("webhook-id") != webhook.EventID(c.id) {
					t.Errorf("%s: webhook-id %q, want %q", c.typ, a.header.Get("webhook-id"), webhook.EventID(c.id))
				}
			}
		}
	})
}
