package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// The outcomes cap (EVS_MAX_OUTCOMES=5), on both deployments: a post
// that would take the account past it is 429 rate_limited naming the cap,
// with a Retry-After, and none of it is kept: the room it would have
// taken is still there, exactly, for the next post. A test-mode account
// has a tenth of the cap.
func TestOutcomesCap(t *testing.T) {
	t.Parallel()
	forEachDeployment(t, suiteOptions{env: map[string]string{"EVS_MAX_OUTCOMES": "5"}}, func(t *testing.T, s *suite) {
		_, key := s.account(t, false)
		post := func(from, n int) reply {
			t.Helper()
			var os []string
			for i := from; i < from+n; i++ {
				os = append(os, fmt.Sprintf(`{"email":"user%d@good.example","outcome":"delivered","at":"2026-11-20T10:00:00Z"}`, i))
			}
			return s.do(t, key, httpCall{method: http.MethodPost, path: "/v1/outcomes", body: `{"outcomes":[` + strings.Join(os, ",") + `]}`})
		}
		if r := post(0, 3); r.status != http.StatusOK {
			t.Fatalf("3 of 5: %d %s", r.status, r.body)
		}
		r := post(3, 3)
		if r.status != http.StatusTooManyRequests || !strings.Contains(string(r.body), `"rate_limited"`) ||
			!strings.Contains(string(r.body), "outcomes cap (5 outcomes") || r.header.Get("Retry-After") == "" {
			t.Fatalf("3 more when 2 are left: %d %v %s; want 429 naming the cap", r.status, r.header, r.body)
		}
		// Nothing of the refused post was kept: exactly 2 still fit.
		if r := post(3, 2); r.status != http.StatusOK {
			t.Fatalf("2 when 2 are left: %d %s", r.status, r.body)
		}
		if r := post(5, 1); r.status != http.StatusTooManyRequests {
			t.Fatalf("one past the cap: %d %s", r.status, r.body)
		}
		_, testKey := s.account(t, true)
		if r := s.do(t, testKey, httpCall{method: http.MethodPost, path: "/v1/outcomes",
			body: `{"outcomes":[{"email":"a@good.example","outcome":"delivered","at":"2026-11-20T10:00:00Z"}]}`}); r.status != http.StatusTooManyRequests {
			t.Fatalf("a test-mode account's cap of 5/10: %d %s", r.status, r.body)
		}
	})
}
