package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/cache"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/store"
)

// memStore keeps what Keep writes.
type memStore struct{ kept []store.CacheEntry }

func (m *memStore) CachedDecision(context.Context, string, evs.Mode, string) (evs.Decision, time.Time, bool, error) {
	return evs.Decision{}, time.Time{}, false, nil
}

func (m *memStore) KeepDecisions(_ context.Context, _ string, es []store.CacheEntry) error {
	m.kept = append(m.kept, es...)
	return nil
}

// TestKeep: which verdicts are kept, and until when.
func TestKeep(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	live := func(r evs.Reason) evs.Decision {
		return evs.Decision{Email: "a@b.example", Normalized: "a@b.example", Reason: r, Mode: evs.ModeFull, CheckedAt: evs.Time{Time: now}}
	}
	testMode, cached, invalid, old := live(evs.ReasonAcceptedEmail), live(evs.ReasonAcceptedEmail), live(evs.ReasonInvalidSyntax), live(evs.ReasonAcceptedEmail)
	testMode.TestMode, cached.Cached, invalid.Normalized, old.CheckedAt = true, true, "", evs.Time{Time: now.Add(-25 * time.Hour)}
	policy := live(evs.ReasonNoMailServer)
	policy.Checks.DNS.Result = evs.DNSMXNotPublic
	tests := []struct {
		name string
		ttl  time.Duration
		d    evs.Decision
		want time.Duration // from CheckedAt; 0: not kept
	}{
		{"deliverable", 24 * time.Hour, live(evs.ReasonAcceptedEmail), 24 * time.Hour},
		{"undeliverable", 24 * time.Hour, live(evs.ReasonRejectedEmail), 24 * time.Hour},
		{"risky: an hour", 24 * time.Hour, live(evs.ReasonAcceptAll), time.Hour},
		{"risky under a shorter TTL", 10 * time.Minute, live(evs.ReasonAcceptAll), 10 * time.Minute},
		{"unknown: never", 24 * time.Hour, live(evs.ReasonTimeout), 0},
		{"test mode: never", 24 * time.Hour, testMode, 0},
		{"a reused verdict is not written back", 24 * time.Hour, cached, 0},
		{"no normalised address", 24 * time.Hour, invalid, 0},
		{"expired already", 24 * time.Hour, old, 0},
		{"cache off", 0, live(evs.ReasonAcceptedEmail), 0},
		{"no mail server we may reach: our egress policy, never", 24 * time.Hour, policy, 0},
		{"no mail server by the DNS: kept", 24 * time.Hour, live(evs.ReasonNoMailServer), 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &memStore{}
			c := &cache.Cache{Store: st, TTL: tt.ttl, Now: func() time.Time { return now }}
			if err := c.Keep(context.Background(), "acct", tt.d); err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.want == 0 && len(st.kept) != 0:
				t.Fatalf("kept %+v", st.kept)
			case tt.want != 0 && (len(st.kept) != 1 || !st.kept[0].ExpiresAt.Equal(tt.d.CheckedAt.Add(tt.want))):
				t.Fatalf("kept %+v, want one entry expiring after %v", st.kept, tt.want)
			}
		})
	}
}
