package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// hookReceiver fails the first failures attempts with 500, then answers 200.
type hookReceiver struct {
	failures int
	mu       sync.Mutex
	headers  []http.Header
	bodies   [][]byte
	first    chan struct{} // closed once the first attempt has been answered
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	h.headers = append(h.headers, r.Header.Clone())
	h.bodies = append(h.bodies, b)
	n := len(h.headers)
	h.mu.Unlock()
	if n <= h.failures {
		w.WriteHeader(http.StatusInternalServerError)
	} else {
		w.WriteHeader(http.StatusOK)
	}
	if n == 1 {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		close(h.first)
	}
}

func (h *hookReceiver) attempts() ([]http.Header, [][]byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]http.Header(nil), h.headers...), append([][]byte(nil), h.bodies...)
}

// TestWebhookSurvivesKill: a test-mode batch whose receiver fails three
// times and then answers 200 gets four attempts, one webhook-id and valid
// signatures, although `evs serve` is SIGKILLed right after the first
// attempt and started again; the envelope then shows the delivery.
func TestWebhookSurvivesKill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bin := buildEVS(t)
	dir := t.TempDir()
	code, out, stderr := runEVS(ctx, map[string]string{"EVS_DATA_DIR": dir}, "keys", "create", "--account", "sandbox", "--test")
	key := strings.TrimSpace(out)
	if code != 0 || !keyRE.MatchString(key) {
		t.Fatalf("keys create: exit %d %q %q", code, out, stderr)
	}
	code, out, stderr = runEVS(ctx, map[string]string{"EVS_DATA_DIR": dir}, "webhooks", "secret", "--account", "sandbox")
	secret := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("webhooks secret: exit %d %q %q", code, out, stderr)
	}
	if code, again, _ := runEVS(ctx, map[string]string{"EVS_DATA_DIR": dir}, "webhooks", "secret", "--account", "sandbox"); code != 0 || strings.TrimSpace(again) != secret {
		t.Fatalf("a second webhooks secret printed another secret (exit %d)", code)
	}

	rc := &hookReceiver{failures: 3, first: make(chan struct{})}
	srv := httptest.NewServer(rc)
	defer srv.Close()

	env := []string{
		"EVS_DATA_DIR=" + dir,
		"EVS_SMTP=off",
		"EVS_EGRESS_ALLOW=127.0.0.0/8", // the receiver is on loopback
		"EVS_SMTP_HELO=localhost",
		"EVS_RATE_LIMIT=off",
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
	}
	p1 := startServe(t, bin, env)
	body, _ := json.Marshal(map[string]any{
		"emails": []string{"accepted_email@x.example", "rejected_email@x.example"}, "mode": "quick",
		"callbackUrl": srv.URL + "/hooks/evs",
	})
	status, raw := call(t, key, "POST", p1.base+"/v1/requests", string(body))
	if status != 201 {
		t.Fatalf("create batch: %d %s", status, raw)
	}
	var created batchEnvelope
	if err := json.Unmarshal(raw, &created); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rc.first:
	case <-time.After(30 * time.Second):
		t.Fatalf("no webhook attempt 30 s after the batch was created:\n%s", p1.err.String())
	}
	if err := p1.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	<-p1.done
	if h, _ := rc.attempts(); len(h) != 1 {
		t.Fatalf("%d attempts before the kill, want 1", len(h))
	}

	p2 := startServe(t, bin, env)
	var final hookEnvelope
	testkit.EventuallyEvery(t, 60*time.Second, 100*time.Millisecond, func() error {
		status, raw := call(t, key, "GET", p2.base+"/v1/requests/"+created.Request.ID, "")
		if status != 200 {
			t.Fatalf("poll: %d %s", status, raw)
		}
		final = hookEnvelope{}
		if err := json.Unmarshal(raw, &final); err != nil {
			t.Fatal(err)
		}
		if final.Request.Callback != nil && final.Request.Callback.State != "pending" {
			return nil
		}
		return fmt.Errorf("delivery not done after the restart: %s\n%s", raw, p2.err.String())
	})
	cb := final.Request.Callback
	if cb.State != "delivered" || cb.Attempts != 4 || cb.LastStatus == nil || *cb.LastStatus != 200 ||
		final.Request.CallbackURL != srv.URL+"/hooks/evs" || final.Request.State != "completed" {
		t.Fatalf("envelope after delivery: %+v callback %+v", final.Request, *cb)
	}
	// A further (wrong) attempt would come within the 1 s test-mode delay.
	// A witness batch, created now, whose receiver fails its first attempt
	// once: its retry, by the same delivery loop, comes a test-mode delay
	// after that attempt, so once it has arrived the delay has passed for
	// the first batch too.
	witness := &hookReceiver{failures: 1, first: make(chan struct{})}
	wsrv := httptest.NewServer(witness)
	defer wsrv.Close()
	body, _ = json.Marshal(map[string]any{"emails": []string{"accepted_email@x.example"}, "mode": "quick", "callbackUrl": wsrv.URL + "/hooks/evs"})
	if status, raw := call(t, key, "POST", p2.base+"/v1/requests", string(body)); status != 201 {
		t.Fatalf("create the witness batch: %d %s", status, raw)
	}
	testkit.EventuallyEvery(t, 30*time.Second, 50*time.Millisecond, func() error {
		if h, _ := witness.attempts(); len(h) < 2 {
			return fmt.Errorf("the witness batch's receiver has %d attempts, want its retry", len(h))
		}
		return nil
	})
	headers, bodies := rc.attempts()
	if len(headers) != 4 {
		t.Fatalf("%d attempts reached the receiver, want 4", len(headers))
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	id := headers[0].Get("webhook-id")
	for i, h := range headers {
		if h.Get("webhook-id") != id || id == "" {
			t.Errorf("attempt %d webhook-id %q, want %q on every attempt", i+1, h.Get("webhook-id"), id)
		}
		if err := wh.Verify(bodies[i], h); err != nil {
			t.Errorf("attempt %d: signature: %v", i+1, err)
		}
		if ct := h.Get("Content-Type"); ct != "application/json" {
			t.Errorf("attempt %d Content-Type %q", i+1, ct)
		}
		var ev struct {
			Type string `json:"type"`
			Data struct {
				Request struct {
					ID    string `json:"id"`
					State string `json:"state"`
				} `json:"request"`
				Counters struct {
					Processed, Deliverable, Undeliverable int
				} `json:"counters"`
			} `json:"data"`
		}
		if err := json.Unmarshal(bodies[i], &ev); err != nil {
			t.Fatalf("attempt %d body: %v", i+1, err)
		}
		if ev.Type != "batch.completed" || ev.Data.Request.ID != created.Request.ID || ev.Data.Counters.Processed != 2 ||
			ev.Data.Counters.Deliverable != 1 || ev.Data.Counters.Undeliverable != 1 {
			t.Errorf("attempt %d event %s", i+1, bodies[i])
		}
	}
}

// hookEnvelope is the batch envelope with its webhook fields.
type hookEnvelope struct {
	Request struct {
		ID          string `json:"id"`
		State       string `json:"state"`
		CallbackURL string `json:"callbackUrl"`
		Callback    *struct {
			State      string `json:"state"`
			Attempts   int    `json:"attempts"`
			LastStatus *int   `json:"lastStatus"`
		} `json:"callback"`
	} `json:"request"`
}
