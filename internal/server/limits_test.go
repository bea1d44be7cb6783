package server_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/api"
)

// padded is a valid JSON batch of one address, exactly n bytes long (the
// padding is JSON whitespace).
func padded(n int) string {
	head, tail := `{"emails":[`, `"accepted_email@x.example"]}`
	return head + strings.Repeat(" ", n-len(head)-len(tail)) + tail
}

// `evs serve` keeps the contract's 6 MiB for batch creation: a body of
// exactly 6 MiB makes a batch, one byte more is 413 payload_too_large
// naming the limit and POST /v1/uploads; every reply matches the OpenAPI
// document. (That no more than limit+1 bytes are read, and the connection
// closed, is TestBodyReadToRouteLimit's.)
func TestServeBatchBodyLimit(t *testing.T) {
	h := start(t, options{})
	r := h.do(req{method: http.MethodPost, path: "/v1/requests", key: h.testKey, body: padded(api.MaxBatchBody)})
	if r.status != http.StatusCreated {
		t.Fatalf("6 MiB: %d %.300s", r.status, r.body)
	}
	r = h.do(req{method: http.MethodPost, path: "/v1/requests", key: h.testKey, body: padded(api.MaxBatchBody + 1)})
	if r.status != http.StatusRequestEntityTooLarge || r.errorCode(t) != "payload_too_large" {
		t.Fatalf("6 MiB + 1: %d %s", r.status, r.body)
	}
	msg := string(r.body)
	if !strings.Contains(msg, strconv.Itoa(api.MaxBatchBody)+" bytes") || !strings.Contains(msg, "POST /v1/uploads") {
		t.Fatalf("6 MiB + 1: message %s", msg)
	}
	// /v1/verify: its own limit, no mention of uploads.
	r = h.do(req{method: http.MethodPost, path: "/v1/verify", key: h.testKey, body: `{"email":"a@x.example","x":"` + strings.Repeat("y", api.MaxVerifyBody) + `"}`})
	if r.status != http.StatusRequestEntityTooLarge || r.errorCode(t) != "payload_too_large" || strings.Contains(string(r.body), "uploads") {
		t.Fatalf("verify over 8 KiB: %d %s", r.status, r.body)
	}
}
