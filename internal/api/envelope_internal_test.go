package api

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/evs"
)

// The batch envelope encodes itself on every poll; it must write what
// json.Marshal writes for it.
func TestBatchEnvelopeAppendJSON(t *testing.T) {
	at := time.Date(2026, 11, 23, 16, 30, 0, 987654321, time.FixedZone("y", -7200))
	status := 503
	tests := []batchEnvelope{
		{},
		envelopeOf(evs.Batch{ID: "6f1c1c8e-8f5e-4b59-9d55-0c3f5b1f0a11", Mode: evs.ModeQuick, State: evs.StateRunning, CreatedAt: at,
			Counters: evs.Counters{Total: 50000, Duplicates: 3, Processed: 1234, Deliverable: 1000, Undeliverable: 200, Risky: 30, Unknown: 4}}, false),
		withDelivery(envelopeOf(evs.Batch{ID: "x<&>\"\\\u2028\xff", State: evs.StateFailed, Error: "deadline \u2029 <passed>", CreatedAt: at, CompletedAt: at.Add(time.Hour)}, true),
			evs.Delivery{URL: "https://hooks.example/a?b=c&d=<e>", State: evs.CallbackState("failed"), Attempts: 7, LastStatus: status}),
		withDelivery(envelopeOf(evs.Batch{State: evs.StateCompleted, CreatedAt: at, CompletedAt: at}, false),
			evs.Delivery{URL: "https://h.example/", State: evs.CallbackState("pending")}),
	}
	for i, e := range tests {
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if got := e.appendJSON(nil); !bytes.Equal(got, want) {
			t.Errorf("%d: appendJSON\n got %s\nwant %s", i, got, want)
		}
	}
}
