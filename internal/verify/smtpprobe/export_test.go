package smtpprobe

import (
	"context"

	"github.com/evs-dev/evs/internal/config"
)

// What the tests of package smtpprobe_test use beside the package's API.

// Families returns the phrase families in table order, for
// documentation and tests. The caller must not modify them.
func Families() []Family {
	out := make([]Family, len(families))
	for i, f := range families {
		out[i] = *f
		out[i].re = nil
	}
	return out
}

// Providers returns the provider table, for documentation and tests. The
// caller must not modify it.
func Providers() []ProviderInfo {
	out := make([]ProviderInfo, len(providers))
	for i, p := range providers {
		out[i] = *p
		out[i].fp = nil
	}
	return out
}

// Classify decides what a reply at a stage (StageBanner, StageEHLO,
// StageMail or StageRcpt) says; it is Read without the explanation.
func Classify(stage string, r Reply) Class { return Read(stage, r).Class }

// Read decides what a reply at a stage says when the provider of the host
// that sent it is not known: only the reply's own fingerprint (Gmail's
// "gsmtp", Microsoft's "AS(...)") can name one. See ReadFrom.
func Read(stage string, r Reply) Reading { return ReadFrom(stage, "", r) }

// Rcpt sends RCPT TO:<address> and classifies the reply; it is Check
// without the explanation.
func (s *Session) Rcpt(ctx context.Context, address string) (Reply, Class, error) {
	r, rd, err := s.Check(ctx, address)
	return r, rd.Class, err
}

// NewSOCKS5Dialer returns the dialer of one SOCKS5 exit, without the
// health checks and rotation of Exits.
func NewSOCKS5Dialer(proxyURL string, policy *config.EgressPolicy) (ContextDialer, error) {
	return newSOCKS5(proxyURL, policy, 0)
}
