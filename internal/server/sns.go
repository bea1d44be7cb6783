package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/evs-dev/evs/internal/api"
	"github.com/evs-dev/evs/internal/evs"
	"github.com/evs-dev/evs/internal/webhook"
)

// snsRoute is the route of Amazon SNS's HTTP(S) subscriptions carrying
// SES notifications (on AWS an SQS queue takes them).
const snsRoute = "/v1/outcomes/sns"

// SNSOptions set up POST /v1/outcomes/sns. The zero value verifies
// signatures against AWS's SNS hosts and the system's roots, and confirms
// subscriptions by visiting their SubscribeURL on an SNS host.
type SNSOptions struct {
	// Verifier, when set, replaces the AWS one (tests: a loopback CA and
	// host).
	Verifier *api.SNSVerifier
	// Confirm, when set, replaces the GET of a SubscribeURL.
	Confirm func(ctx context.Context, url string) error
	// Topics, when not empty, are the only TopicArns accepted
	// (EVS_SNS_TOPICS).
	Topics []string
}

// snsAccounts is what the endpoint reads to name the account: the
// account (active or suspended) and its webhook secrets, from which the
// URL's token is made (api.SNSToken).
type snsAccounts interface {
	Account(ctx context.Context, id string) (evs.Account, error)
	WebhookSecret(ctx context.Context, accountID string) (evs.WebhookSecret, error)
}

// snsEndpoint serves snsRoute.
type snsEndpoint struct {
	recv     *api.SNSOutcomes
	accounts snsAccounts
	now      func() time.Time
}

// newSNSEndpoint returns the endpoint, or nil when the store keeps no
// outcomes or no webhook secrets.
func newSNSEndpoint(o Options, outcomes api.Outcomes, ledger api.Ledger) *snsEndpoint {
	accounts, ok := o.Store.(snsAccounts)
	if !ok || outcomes == nil {
		return nil
	}
	// Certificates and SubscribeURLs are fetched under the egress policy,
	// without redirects (a SubscribeURL answers itself; a redirect would
	// leave the SNS host the verifier checked).
	client := webhook.NewClient(o.Config.Egress)
	v := o.SNS.Verifier
	if v == nil {
		v = api.NewSNSVerifier(api.HTTPCertFetcher{Client: client}, api.AWSSNSHost, nil, o.Now)
	}
	topics := o.SNS.Topics
	if len(topics) == 0 {
		topics = o.Config.SNSTopics
	}
	confirm := o.SNS.Confirm
	if confirm == nil {
		confirm = api.HTTPConfirm(client)
	}
	return &snsEndpoint{
		recv: &api.SNSOutcomes{Verifier: v, Topics: topics, Confirm: confirm, Store: outcomes, Ledger: ledger,
			TTL: o.Config.OutcomeTTL, Now: o.Now},
		accounts: accounts,
		now:      o.Now,
	}
}

// errSNSToken is the one answer to a URL whose account or token is wrong:
// which of them was wrong is not told.
var errSNSToken = evs.Errorf(evs.CodeUnauthorized, "The URL's account and token do not match; make the URL with `evs outcomes sns-url`.")

// receiveSNS answers POST /v1/outcomes/sns?account=ID&token=T: the token,
// made from the account's webhook secret, names the account. The message's
// SNS signature is verified before anything is stored or visited.
func (g *edge) receiveSNS(w http.ResponseWriter, r *http.Request) {
	c := routed(r, snsRoute)
	client, ok := g.admitTokenCall(w, r, c, http.MethodPost)
	if !ok {
		return
	}
	ctx := r.Context()
	q := r.URL.Query()
	account, err := g.o.sns.account(ctx, q.Get("account"), q.Get("token"))
	if err != nil {
		if evs.ErrorCode(err) == evs.CodeUnauthorized {
			g.fails.fail(client, g.o.Now())
		}
		writeCallError(w, r, c, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, api.MaxSNSBody))
	if err != nil {
		if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
			err = api.TooLarge(snsRoute, api.MaxSNSBody)
		} else {
			err = evs.Wrap(err, evs.CodeInvalidRequest, "The request body could not be read.")
		}
		writeCallError(w, r, c, err)
		return
	}
	rec, err := g.o.sns.recv.Receive(ctx, account, body)
	if err != nil {
		if evs.ErrorCode(err) == evs.CodeForbidden {
			// Why the signature failed is for the operator, not the
			// client; it names no address.
			g.o.Logger.Warn("sns message refused", "route", snsRoute, "error", err.Error())
		}
		writeCallError(w, r, c, err)
		return
	}
	c.Attr = slog.Group("sns", "type", rec.Type, "outcomes", rec.Received, "accepted", rec.Accepted)
	b, _ := json.Marshal(struct {
		RequestID string `json:"requestId"`
		api.SNSReceipt
	}{c.RequestID, rec})
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// account checks the URL's account and token and returns the account's
// id: unknown and suspended accounts, accounts without a webhook secret
// and wrong tokens are all errSNSToken.
func (s *snsEndpoint) account(ctx context.Context, id, token string) (string, error) {
	if id == "" || token == "" || len(id) > 128 || len(token) > 128 {
		return "", errSNSToken
	}
	a, err := s.accounts.Account(ctx, id)
	var sec evs.WebhookSecret
	if err == nil && !a.Suspended {
		sec, err = s.accounts.WebhookSecret(ctx, id)
	}
	switch {
	case err != nil && evs.ErrorCode(err) != evs.CodeNotFound:
		return "", err
	case err != nil || a.Suspended || !api.SNSTokenValid(token, id, webhook.Signers(sec, s.now())):
		return "", errSNSToken
	}
	return a.ID, nil
}
