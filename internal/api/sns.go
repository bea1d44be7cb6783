package api

import (
	"context"
	"crypto"
	"crypto/rsa"
	_ "crypto/sha1"   //nolint:gosec // SNS SignatureVersion 1 is SHA1withRSA: AWS still sends it
	_ "crypto/sha256" // SignatureVersion 2
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Amazon SNS messages, as an HTTP(S) subscription or an SQS queue receives
// them, and the check of their signature as AWS documents it: the key is in
// the certificate at SigningCertURL, which must be https on an SNS host and
// chain to a trusted root. `evs serve`'s POST /v1/outcomes/sns and the AWS
// worker both use it.

// SNS message types.
const (
	SNSNotification             = "Notification"
	SNSSubscriptionConfirmation = "SubscriptionConfirmation"
	SNSUnsubscribeConfirmation  = "UnsubscribeConfirmation"
)

// SNSMessage is one Amazon SNS message (the JSON document of the POST body,
// or of an SQS message's body).
type SNSMessage struct {
	Type             string `json:"Type"`
	MessageID        string `json:"MessageId"`
	Token            string `json:"Token,omitempty"`
	TopicArn         string `json:"TopicArn"`
	Subject          string `json:"Subject,omitempty"`
	Message          string `json:"Message"`
	Timestamp        string `json:"Timestamp"`
	SignatureVersion string `json:"SignatureVersion"`
	Signature        string `json:"Signature"`
	SigningCertURL   string `json:"SigningCertURL"`
	SubscribeURL     string `json:"SubscribeURL,omitempty"`
	UnsubscribeURL   string `json:"UnsubscribeURL,omitempty"`
	// hasSubject tells a present empty Subject from none: the canonical
	// string has the field exactly when the message has it.
	hasSubject bool
}

// ParseSNSMessage reads an SNS message. Fields SNS may add later are
// ignored; the signed ones must be strings.
func ParseSNSMessage(b []byte) (SNSMessage, error) {
	var m SNSMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return SNSMessage{}, fmt.Errorf("sns: not an SNS message: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err == nil {
		_, m.hasSubject = raw["Subject"]
	}
	return m, nil
}

// StringToSign is the canonical string the message's signature is over:
// each signed field of its type as its name, a newline, its value, a
// newline.
func (m SNSMessage) StringToSign() (string, error) {
	var b strings.Builder
	add := func(k, v string) { b.WriteString(k + "\n" + v + "\n") }
	add("Message", m.Message)
	add("MessageId", m.MessageID)
	switch m.Type {
	case SNSNotification:
		if m.hasSubject || m.Subject != "" {
			add("Subject", m.Subject)
		}
		add("Timestamp", m.Timestamp)
	case SNSSubscriptionConfirmation, SNSUnsubscribeConfirmation:
		add("SubscribeURL", m.SubscribeURL)
		add("Timestamp", m.Timestamp)
		add("Token", m.Token)
	default:
		return "", fmt.Errorf("sns: unknown message type %.40q", m.Type)
	}
	add("TopicArn", m.TopicArn)
	add("Type", m.Type)
	return b.String(), nil
}

// snsHost is the host of AWS's SNS endpoints: exactly
// sns.<region>.amazonaws.com (or .com.cn), never an S3 host such as
// sns.s3-us-west-2.amazonaws.com, where anyone's bucket named "sns" would
// serve the certificate.
var snsHost = regexp.MustCompile(`^sns\.(cn(-[a-z]+)+-[0-9]+\.amazonaws\.com\.cn|[a-z]{2,4}(-[a-z]+)+-[0-9]+\.amazonaws\.com)$`)

// AWSSNSHost tells whether host (a URL's host, with any port) is one of
// AWS's SNS endpoints on the default https port: the rule for a
// SigningCertURL and a SubscribeURL outside tests.
func AWSSNSHost(host string) bool {
	host = strings.TrimSuffix(host, ":443")
	return snsHost.MatchString(host)
}

// CertFetcher fetches a certificate document: the signing certificate's
// PEM at an https SigningCertURL, or an intermediate at the URL a
// certificate's Authority Information Access names.
type CertFetcher interface {
	FetchCert(ctx context.Context, url string) ([]byte, error)
}

const maxCertBytes = 64 << 10

// HTTPCertFetcher fetches certificates with client (its timeout bounds the
// fetch).
type HTTPCertFetcher struct{ Client *http.Client }

// FetchCert gets u and returns its body, at most 64 KiB.
func (f HTTPCertFetcher) FetchCert(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("sns: certificate request: %w", err)
	}
	resp, err := f.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sns: fetch certificate: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("sns: fetch certificate: status %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxCertBytes+1))
	if err != nil {
		return nil, fmt.Errorf("sns: read certificate: %w", err)
	}
	if len(b) > maxCertBytes {
		return nil, errors.New("sns: certificate document too large")
	}
	return b, nil
}

// ErrSNSSignature is the error of every message whose signature does not
// verify, for whatever reason (the wrapped error says which, for tests and
// logs; the client is told no more).
var ErrSNSSignature = errors.New("sns: signature not verified")

// snsCertName is the name SNS's signing certificates are issued to.
const snsCertName = "sns.amazonaws.com"

// maxCachedCerts bounds the certificate cache: SNS signs with a handful
// of certificates per region.
const maxCachedCerts = 64

// SNSVerifier checks SNS message signatures. Certificates are fetched once
// per URL and cached; their validity period is checked on every use.
type SNSVerifier struct {
	fetch  CertFetcher
	hostOK func(host string) bool
	roots  *x509.CertPool
	now    func() time.Time

	mu    sync.Mutex
	certs map[string]*x509.Certificate
}

// NewSNSVerifier returns a verifier fetching certificates with fetch from
// the hosts hostOK accepts (AWSSNSHost outside tests), chained to roots
// (nil: the system's), valid at now().
func NewSNSVerifier(fetch CertFetcher, hostOK func(host string) bool, roots *x509.CertPool, now func() time.Time) *SNSVerifier {
	if now == nil {
		now = time.Now
	}
	return &SNSVerifier{fetch: fetch, hostOK: hostOK, roots: roots, now: now, certs: map[string]*x509.Certificate{}}
}

// HostOK tells whether a URL is https on a host the verifier trusts: the
// rule for SigningCertURL, and for a SubscribeURL before it is visited.
func (v *SNSVerifier) HostOK(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Scheme == "https" && u.User == nil && u.Host != "" && v.hostOK(u.Host)
}

// Verify checks m's signature; any failure wraps ErrSNSSignature.
func (v *SNSVerifier) Verify(ctx context.Context, m SNSMessage) error {
	if err := v.verify(ctx, m); err != nil {
		return fmt.Errorf("%w: %w", ErrSNSSignature, err)
	}
	return nil
}

func (v *SNSVerifier) verify(ctx context.Context, m SNSMessage) error {
	h, ok := map[string]crypto.Hash{"1": crypto.SHA1, "2": crypto.SHA256}[m.SignatureVersion]
	if !ok {
		return fmt.Errorf("unknown SignatureVersion %.10q", m.SignatureVersion)
	}
	s, err := m.StringToSign()
	if err != nil {
		return err
	}
	sig, err := base64.StdEncoding.DecodeString(m.Signature)
	if err != nil || len(sig) == 0 {
		return errors.New("signature is not base64")
	}
	if !v.HostOK(m.SigningCertURL) {
		return errors.New("SigningCertURL is not https on an SNS host")
	}
	cert, err := v.cert(ctx, m.SigningCertURL)
	if err != nil {
		return err
	}
	pub, ok := cert.PublicKey.(*rsa.PublicKey)
	if !ok {
		return errors.New("the certificate's key is not RSA")
	}
	digest := h.New()
	digest.Write([]byte(s))
	if err := rsa.VerifyPKCS1v15(pub, h, digest.Sum(nil), sig); err != nil {
		return fmt.Errorf("signature: %w", err)
	}
	return nil
}

// cert returns the leaf certificate at u, fetched and verified on first
// use, and checks that it is still valid.
func (v *SNSVerifier) cert(ctx context.Context, u string) (*x509.Certificate, error) {
	now := v.now()
	v.mu.Lock()
	c, ok := v.certs[u]
	v.mu.Unlock()
	if ok {
		if now.Before(c.NotBefore) || now.After(c.NotAfter) {
			return nil, errors.New("the signing certificate is expired or not yet valid")
		}
		return c, nil
	}
	doc, err := v.fetch.FetchCert(ctx, u)
	if err != nil {
		return nil, err
	}
	var chain []*x509.Certificate
	for rest := doc; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		chain = append(chain, c)
	}
	if len(chain) == 0 {
		return nil, errors.New("no certificate at SigningCertURL")
	}
	leaf := chain[0]
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	// The chain must reach a trusted root, at now; the leaf must be the
	// one SNS signs with, not any certificate a CA issued.
	opts := x509.VerifyOptions{Roots: v.roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	_, err = leaf.Verify(opts)
	if _, unknown := errors.AsType[x509.UnknownAuthorityError](err); unknown && len(leaf.IssuingCertificateURL) > 0 {
		// SNS's PEM holds the leaf alone, and Go does not fetch missing
		// intermediates as browsers do: fetch the issuer its Authority
		// Information Access names. Whatever comes back is only an
		// intermediate, still verified up to the roots, so its URL needs
		// no host rule; the fetch is under the egress policy like any.
		for _, u := range leaf.IssuingCertificateURL[:min(2, len(leaf.IssuingCertificateURL))] {
			if c, ferr := v.issuer(ctx, u); ferr == nil {
				inter.AddCert(c)
			}
		}
		_, err = leaf.Verify(opts)
	}
	if err != nil {
		return nil, fmt.Errorf("certificate chain: %w", err)
	}
	if err := leaf.VerifyHostname(snsCertName); err != nil {
		return nil, fmt.Errorf("certificate is not SNS's: %w", err)
	}
	v.mu.Lock()
	if len(v.certs) >= maxCachedCerts {
		clear(v.certs)
	}
	v.certs[u] = leaf
	v.mu.Unlock()
	return leaf, nil
}

// issuer fetches an intermediate certificate at an AIA URL (DER, as CAs
// publish them, or PEM).
func (v *SNSVerifier) issuer(ctx context.Context, u string) (*x509.Certificate, error) {
	if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") {
		return nil, errors.New("the issuer's URL is not http(s)")
	}
	b, err := v.fetch.FetchCert(ctx, u)
	if err != nil {
		return nil, err
	}
	if p, _ := pem.Decode(b); p != nil {
		b = p.Bytes
	}
	c, err := x509.ParseCertificate(b)
	if err != nil {
		return nil, fmt.Errorf("parse issuer: %w", err)
	}
	return c, nil
}
