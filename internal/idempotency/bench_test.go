package idempotency_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/evs-dev/evs/internal/idempotency"
)

func benchFn(context.Context) (idempotency.Reply, error) {
	return idempotency.Reply{
		StatusCode: 200,
		Headers:    map[string]string{"Content-Type": "application/json"},
		Body:       []byte(`{"requestId":"r","decision":{"status":"deliverable","reason":"accepted_email","score":97}}`),
	}, nil
}

// BenchmarkDoFirst measures a first call, one at a time: in shared mode
// claim, run, complete (two SQLite write transactions, one synced); in
// local mode lookup, run, put (one read, one synced write).
func BenchmarkDoFirst(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			e := newEnv(b, m)
			ctx := context.Background()
			i := 0
			for b.Loop() {
				i++
				if _, _, err := e.k.Do(ctx, verifyReq("k"+strconv.Itoa(i), `{"email":"a@x.example","mode":"full"}`, "r"), benchFn); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDoReplay measures a repeat answered from the stored reply.
func BenchmarkDoReplay(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			e := newEnv(b, m)
			ctx := context.Background()
			req := verifyReq("k", `{"email":"a@x.example","mode":"full"}`, "r")
			if _, _, err := e.k.Do(ctx, req, benchFn); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, replayed, err := e.k.Do(ctx, req, benchFn); err != nil || !replayed {
					b.Fatal(replayed, err)
				}
			}
		})
	}
}

// BenchmarkFingerprint measures canonicalising a small JSON body.
func BenchmarkFingerprint(b *testing.B) {
	body := []byte(`{"mode":"full","email":"someone@example.com","options":{"smtp":true,"catchAll":false}}`)
	for b.Loop() {
		idempotency.Fingerprint("POST", "/v1/verify", "application/json", body)
	}
}
