package authorizer_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/authorizer"
	"github.com/evs-dev/evs/internal/evs"
)

func TestPublishableKeyFormat(t *testing.T) {
	k, err := authorizer.NewPublishableKey()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k, authorizer.PublishablePrefix) || !authorizer.WellFormed(k) {
		t.Fatalf("NewPublishableKey() = %q: not evs_pk. and well formed", k)
	}
	secret, _ := authorizer.NewKey()
	for _, bad := range []string{
		authorizer.PublishablePrefix + secret[len(authorizer.KeyPrefix):] + "A", // too long
		authorizer.PublishablePrefix + secret[len(authorizer.KeyPrefix)+1:],     // too short
		"evs_pkX" + secret[len(authorizer.KeyPrefix):],                          // no dot
	} {
		if authorizer.WellFormed(bad) {
			t.Errorf("WellFormed(%q) = true", bad)
		}
	}
}

func TestCanonicalOrigin(t *testing.T) {
	tests := []struct{ in, want string }{
		{"https://shop.example", "https://shop.example"},
		{"HTTPS://Shop.Example:443", "https://shop.example"},
		{"https://shop.example/", "https://shop.example"},
		{"https://shop.example:8443", "https://shop.example:8443"},
		{"http://localhost:3000", "http://localhost:3000"},
		{"http://127.0.0.2", "http://127.0.0.2"},
		{"http://[::1]:8080", "http://[::1]:8080"},
		{"http://shop.example", ""}, // http only on loopback
		{"https://shop.example/path", ""},
		{"https://shop.example?q", ""},
		{"https://shop.example#f", ""},
		{"https://user@shop.example", ""},
		{"https://*.shop.example", ""},
		{"https://shop.example:0", ""},
		{"https://shop.example:99999", ""},
		{"ftp://shop.example", ""},
		{"shop.example", ""},
		{"null", ""},
		{"", ""},
	}
	for _, tt := range tests {
		got, err := authorizer.CanonicalOrigin(tt.in)
		if tt.want == "" {
			if err == nil || evs.ErrorCode(err) != evs.CodeInvalidRequest {
				t.Errorf("CanonicalOrigin(%q) = %q, %v; want an invalid_request error", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("CanonicalOrigin(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	if _, err := authorizer.CheckOrigins(nil); err == nil {
		t.Error("CheckOrigins(nil) accepted no origin")
	}
	got, err := authorizer.CheckOrigins([]string{"https://a.example", "https://A.example:443/"})
	if err != nil || len(got) != 1 {
		t.Errorf("CheckOrigins of one origin twice = %v, %v; want it once", got, err)
	}
}

func TestPermit(t *testing.T) {
	pk := evs.Principal{AccountID: "a", Kind: evs.KeyPublishable, Origins: []string{"https://shop.example", "http://localhost:8080"}}
	secret := evs.Principal{AccountID: "a"}
	tests := []struct {
		name                  string
		p                     evs.Principal
		method, route, origin string
		ok                    bool
	}{
		{"secret key anywhere", secret, http.MethodGet, "/v1/requests", "", true},
		{"listed origin", pk, http.MethodPost, "/v1/verify", "https://shop.example", true},
		{"second listed origin", pk, http.MethodPost, "/v1/verify", "http://localhost:8080", true},
		{"no origin", pk, http.MethodPost, "/v1/verify", "", false},
		{"other origin", pk, http.MethodPost, "/v1/verify", "https://evil.example", false},
		{"origin in another case", pk, http.MethodPost, "/v1/verify", "https://SHOP.example", false},
		{"origin with a path", pk, http.MethodPost, "/v1/verify", "https://shop.example/", false},
		{"null origin", pk, http.MethodPost, "/v1/verify", "null", false},
		{"other method", pk, http.MethodGet, "/v1/verify", "https://shop.example", false},
		{"other route", pk, http.MethodPost, "/v1/requests", "https://shop.example", false},
		{"listing", pk, http.MethodGet, "/v1/requests", "https://shop.example", false},
	}
	for _, tt := range tests {
		err := authorizer.Permit(tt.p, tt.method, tt.route, tt.origin)
		if tt.ok && err != nil || !tt.ok && evs.ErrorCode(err) != evs.CodeForbidden {
			t.Errorf("%s: Permit = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

type keyRecorder struct{ k evs.Key }

func (r *keyRecorder) CreateKey(_ context.Context, k evs.Key) error { r.k = k; return nil }

func TestIssuePublishable(t *testing.T) {
	var st keyRecorder
	key, err := authorizer.Issue(context.Background(), &st, evs.Key{AccountID: "a", Kind: evs.KeyPublishable,
		Origins: []string{"https://Shop.example:443"}}, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, authorizer.PublishablePrefix) || st.k.Kind != evs.KeyPublishable ||
		len(st.k.Origins) != 1 || st.k.Origins[0] != "https://shop.example" || st.k.Hash != authorizer.HashKey(key) {
		t.Fatalf("Issue publishable = %q, stored %+v", key, st.k)
	}
	if _, err := authorizer.Issue(context.Background(), &st, evs.Key{AccountID: "a", Kind: evs.KeyPublishable}, time.Unix(0, 0)); err == nil {
		t.Error("Issue made a publishable key without origins")
	}
	if _, err := authorizer.Issue(context.Background(), &st, evs.Key{AccountID: "a", Origins: []string{"https://a.example"}}, time.Unix(0, 0)); err == nil {
		t.Error("Issue made a secret key with origins")
	}
}
