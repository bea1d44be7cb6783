package metrics_test

import (
	"testing"

	"github.com/evs-dev/evs/internal/metrics"
)

func TestRoute(t *testing.T) {
	routes := []string{"/v1/verify", "/v1/requests", "/v1/requests/{id}", "/v1/requests/{id}/results", "/v1/requests/{id}/cancel"}
	for path, want := range map[string]string{
		"/v1/verify":                    "/v1/verify",
		"/v1/requests":                  "/v1/requests",
		"/v1/requests/abc":              "/v1/requests/{id}",
		"/v1/requests/abc/results":      "/v1/requests/{id}/results",
		"/v1/requests/abc/cancel":       "/v1/requests/{id}/cancel",
		"/v1/requests/":                 "unmatched",
		"/v1/requests//results":         "unmatched",
		"/v1/requests/a@b.example/nope": "unmatched",
		"/":                             "unmatched",
		"/alice@example.com":            "unmatched",
	} {
		if got := metrics.Route(path, routes); got != want {
			t.Errorf("Route(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestReplyClass(t *testing.T) {
	for code, want := range map[int]string{250: "2xx", 450: "4xx", 550: "5xx", 0: "", 199: "", 600: ""} {
		if got := metrics.ReplyClass(code); got != want {
			t.Errorf("ReplyClass(%d) = %q, want %q", code, got, want)
		}
	}
}
