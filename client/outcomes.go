package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// Outcome is what happened when mail was sent to an address, as the
// sending service reported it (contract section 18).
type Outcome struct {
	Email string `json:"email"`
	// Outcome is "delivered", "bounced", "complained" or "deferred".
	Outcome string    `json:"outcome"`
	At      time.Time `json:"at"`
	// BounceType is "hard" or "soft", with "bounced" only; only a hard
	// bounce makes a later verdict undeliverable.
	BounceType string `json:"bounceType,omitempty"`
	SMTPReply  string `json:"smtpReply,omitempty"`
}

// OutcomesReceived says what ReportOutcomes stored.
type OutcomesReceived struct {
	RequestID  string `json:"requestId"`
	Received   int    `json:"received"`
	Accepted   int    `json:"accepted"`   // stored by this call
	Duplicates int    `json:"duplicates"` // already stored
}

// ReportOutcomes sends outcomes (at most 50,000 a call). One the service
// refuses refuses the call, naming it; nothing of it is stored, and the
// corrected list can be sent again whole, since outcomes already stored
// count as duplicates.
func (c *Client) ReportOutcomes(ctx context.Context, outcomes []Outcome) (*OutcomesReceived, error) {
	body, err := json.Marshal(struct {
		Outcomes []Outcome `json:"outcomes"`
	}{outcomes})
	if err != nil {
		return nil, err
	}
	_, b, err := c.do(ctx, request{method: http.MethodPost, path: "/v1/outcomes",
		header: map[string]string{"Content-Type": "application/json"}, body: body})
	if err != nil {
		return nil, err
	}
	var r OutcomesReceived
	return &r, c.decode(b, &r)
}

// DeleteOutcomes forgets every outcome reported for email and returns how
// many there were.
func (c *Client) DeleteOutcomes(ctx context.Context, email string) (int, error) {
	_, b, err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/outcomes?" + url.Values{"email": {email}}.Encode()})
	if err != nil {
		return 0, err
	}
	var r struct {
		RequestID string `json:"requestId"`
		Deleted   int    `json:"deleted"`
	}
	return r.Deleted, c.decode(b, &r)
}

// OutcomesReport is how right the verdicts were on the account's own
// mail: its outcomes counted by the verdict and score bucket given before.
type OutcomesReport struct {
	RequestID string              `json:"requestId"`
	Outcomes  int                 `json:"outcomes"`
	Rows      []OutcomesReportRow `json:"rows"`
}

// OutcomesReportRow is one verdict and score bucket's outcomes.
type OutcomesReportRow struct {
	Status string `json:"status"` // a status, or "not_verified"
	// ScoreBucket is "80-100" … "0-19"; nil for not_verified.
	ScoreBucket *string `json:"scoreBucket"`
	Sent        int     `json:"sent"`
	Delivered   int     `json:"delivered"`
	HardBounces int     `json:"hardBounces"`
	SoftBounces int     `json:"softBounces"`
	Complaints  int     `json:"complaints"`
	Deferrals   int     `json:"deferrals"`
	// BounceRate is HardBounces / Sent; nil when Sent is 0.
	BounceRate *float64 `json:"bounceRate"`
}

// Report reads the account's calibration table (GET /v1/outcomes/report).
func (c *Client) Report(ctx context.Context) (*OutcomesReport, error) {
	_, b, err := c.do(ctx, request{method: http.MethodGet, path: "/v1/outcomes/report"})
	if err != nil {
		return nil, err
	}
	var r OutcomesReport
	return &r, c.decode(b, &r)
}

// Health reads GET /healthz: "ok", "draining" (the server is stopping) or
// "unavailable" (a dependency is down). It sends no key.
func (c *Client) Health(ctx context.Context) (string, error) {
	_, b, err := c.do(ctx, request{method: http.MethodGet, path: "/healthz", accept: []int{http.StatusServiceUnavailable}})
	if err != nil {
		return "", err
	}
	var h struct {
		Status string `json:"status"`
	}
	return h.Status, c.decode(b, &h)
}
