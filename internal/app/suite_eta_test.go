package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestSuiteBatchSaysItIsLate: a full-mode request whose largest domain's
// mail provider cannot take its addresses before the batch deadline says
// so in its creation's reply and on GET, on both deployments: the
// provider is found through the domain's MX host, its budget is the
// configured RCPT limit across the exits.
func TestSuiteBatchSaysItIsLate(t *testing.T) {
	t.Parallel()
	// other.example's MX host, mx1.good.example, is at provider
	// good.example: 10 RCPT a minute; the domain's own name has no limit.
	env := map[string]string{"EVS_PROVIDER_RCPT_PER_MIN": "*=1048576,good.example=10", "EVS_BATCH_DEADLINE": "20m"}
	forEachDeployment(t, suiteOptions{rcpt: suiteRcpt, env: env}, func(t *testing.T, s *suite) {
		_, key := s.account(t, false)
		var emails []string
		for i := range 300 {
			emails = append(emails, fmt.Sprintf("ok%d@other.example", i))
		}
		list, _ := json.Marshal(emails)
		id, r := s.create(t, key, `{"emails":`+string(list)+`,"mode":"full"}`)
		// Cancelled once read: the 300 probes would take half an hour.
		defer s.do(t, key, httpCall{method: http.MethodPost, path: "/v1/requests/" + id + "/cancel"})
		for what, body := range map[string][]byte{"create": r.body, "GET": s.do(t, key, httpCall{path: "/v1/requests/" + id}).body} {
			var e struct {
				Request struct {
					CreatedAt, DeadlineAt, EstimatedCompletionAt time.Time
				} `json:"request"`
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%s: %v %s", what, err, body)
			}
			q := e.Request
			// 300 RCPTs and 3 probes (sessions of 100) at 10 a minute: 30 min 18 s.
			lane := q.EstimatedCompletionAt.Sub(q.CreatedAt)
			if q.DeadlineAt.Sub(q.CreatedAt) != 20*time.Minute || lane < 30*time.Minute+17*time.Second || lane > 30*time.Minute+18*time.Second {
				t.Fatalf("%s: deadline %s, estimate %s after creation; want 20m and 30m18s: %s", what, q.DeadlineAt.Sub(q.CreatedAt), lane, body)
			}
		}
	})
}
