package server_test

import (
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/evs-dev/evs/internal/server"
)

// TestFreeSpaceWatermark: below EVS_MIN_FREE_BYTES free, a new batch, an
// upload's PUT and an export are refused before a byte is stored (503
// unavailable, Retry-After, safe to retry) and /readyz answers 503, while
// polls, cancels and single verifications go on; once space is back, the
// same calls succeed and /readyz is 200 again, with no restart.
func TestFreeSpaceWatermark(t *testing.T) {
	var free atomic.Uint64
	free.Store(2 << 30)
	prom := server.NewPrometheus(nil)
	h := start(t, options{server: func(o *server.Options) {
		o.Config.MinFreeBytes = 1 << 30
		o.FreeBytes = func() (uint64, error) { return free.Load(), nil }
		o.Metrics = prom
	}})
	below := func() string {
		rec := httptest.NewRecorder()
		prom.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, l := range strings.Split(rec.Body.String(), "\n") {
			if strings.HasPrefix(l, "evs_disk_below_watermark ") {
				return strings.TrimPrefix(l, "evs_disk_below_watermark ")
			}
		}
		return "absent"
	}
	create := func() reply {
		return h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":["greylisted@x.example"]}`})
	}
	r := create()
	if r.status != 201 {
		t.Fatalf("create with space: %d %s", r.status, r.body)
	}
	id := decodeEnvelope(t, r).Request.ID
	_, putURL := h.newUpload(h.testKey, "text/csv")
	ready := func() int { return h.do(req{path: "/readyz"}).status }
	if s := ready(); s != 200 {
		t.Fatalf("/readyz with space: %d", s)
	}

	free.Store(1<<30 - 1)
	if s := ready(); s != 503 || below() != "1" {
		t.Errorf("/readyz below the watermark: %d, gauge %s; want 503 and 1", s, below())
	}
	if r := h.put(putURL, "text/csv", strings.NewReader("email\na@x.example\n")); r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Errorf("upload PUT below the watermark: %d %v %s", r.status, r.header, r.body)
	}
	if r := h.do(req{path: "/v1/requests/" + id + "/export", key: h.testKey}); r.status != 503 || r.errorCode(t) != "unavailable" {
		t.Errorf("export below the watermark: %d %s", r.status, r.body)
	}
	r = create()
	if r.status != 503 || r.errorCode(t) != "unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("create below the watermark: %d %v %s", r.status, r.header, r.body)
	}
	if r := h.do(req{path: "/v1/requests/" + id, key: h.testKey}); r.status != 200 {
		t.Errorf("poll below the watermark: %d %s", r.status, r.body)
	}
	if r := h.do(req{method: "POST", path: "/v1/verify", key: h.testKey, body: `{"email":"accepted_email@x.example"}`}); r.status != 200 {
		t.Errorf("verify below the watermark: %d %s", r.status, r.body)
	}
	if r := h.do(req{method: "POST", path: "/v1/requests/" + id + "/cancel", key: h.testKey}); r.status != 200 && r.status != 409 {
		t.Errorf("cancel below the watermark: %d %s", r.status, r.body)
	}

	free.Store(1 << 30)
	if r := create(); r.status != 201 {
		t.Fatalf("create once space is back: %d %s", r.status, r.body)
	}
	if s := ready(); s != 200 || below() != "0" {
		t.Errorf("/readyz once space is back: %d, gauge %s", s, below())
	}
	if r := h.put(putURL, "text/csv", strings.NewReader("email\na@x.example\n")); r.status != 200 {
		t.Errorf("upload PUT once space is back: %d %s", r.status, r.body)
	}
}
