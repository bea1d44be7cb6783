package server_test

import (
	"sync/atomic"
	"testing"

	"github.com/evs-dev/evs/internal/server"
)

// TestFreeSpaceWatermark: below EVS_MIN_FREE_BYTES free, a new batch is
// refused before its body is read (503 unavailable, Retry-After, safe to
// retry) while polls, cancels and single verifications go on; once space
// is back, the same call creates the batch.
func TestFreeSpaceWatermark(t *testing.T) {
	var free atomic.Uint64
	free.Store(2 << 30)
	h := start(t, options{server: func(o *server.Options) {
		o.Config.MinFreeBytes = 1 << 30
		o.FreeBytes = func() (uint64, error) { return free.Load(), nil }
	}})
	create := func() reply {
		return h.do(req{method: "POST", path: "/v1/requests", key: h.testKey, body: `{"emails":["greylisted@x.example"]}`})
	}
	r := create()
	if r.status != 201 {
		t.Fatalf("create with space: %d %s", r.status, r.body)
	}
	id := decodeEnvelope(t, r).Request.ID

	free.Store(1<<30 - 1)
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
}
