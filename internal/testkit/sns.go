package testkit

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1" //nolint:gosec // SNS SignatureVersion 1
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// SNS is a stand-in for Amazon SNS on loopback: a CA of its own, a
// signing certificate issued by it to sns.amazonaws.com (as SNS's is),
// served over TLS at CertURL, and messages signed as SNS signs them, in
// the shape of the samples of AWS's documentation ("HTTP/HTTPS notification
// JSON format", "HTTP/HTTPS subscription confirmation JSON format"). Its
// confirmation URL records each visit.
type SNS struct {
	// Host is the TLS server's host:port; CertURL the signing
	// certificate's URL on it.
	Host, CertURL string
	// Roots trust the CA; Client trusts the TLS server.
	Roots  *x509.CertPool
	Client *http.Client

	key *rsa.PrivateKey
	srv *httptest.Server

	mu        sync.Mutex
	confirmed []string
}

// SNSOptions shape the stand-in.
type SNSOptions struct {
	// Expired issues the signing certificate with a validity that ended a
	// year ago.
	Expired bool
	// OtherName issues it to another name than sns.amazonaws.com.
	OtherName string
	// Intermediate issues it from an intermediate CA that the PEM leaves
	// out, as SNS's does, named by the leaf's Authority Information
	// Access URL on the stand-in.
	Intermediate bool
}

// StartSNS starts the stand-in; it stops with the test.
func StartSNS(t testing.TB, o SNSOptions) *SNS {
	t.Helper()
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "evs test SNS root"},
		NotBefore: now.AddDate(-3, 0, 0), NotAfter: now.AddDate(3, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	s := &SNS{Roots: x509.NewCertPool()}
	s.Roots.AddCert(caCert)
	// The server starts first: the leaf names its issuer's URL on it.
	var certPEM, issuerDER []byte
	s.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		certPEM, issuerDER := certPEM, issuerDER
		s.mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, ".pem"):
			_, _ = w.Write(certPEM)
		case r.URL.Path == "/issuer.cer" && issuerDER != nil:
			_, _ = w.Write(issuerDER)
		case r.URL.Query().Get("Action") == "ConfirmSubscription":
			s.mu.Lock()
			s.confirmed = append(s.confirmed, r.URL.Query().Get("Token"))
			s.mu.Unlock()
			_, _ = w.Write([]byte("<ConfirmSubscriptionResponse/>"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.srv.Close)
	issuer, issuerKey := caCert, caKey
	if o.Intermediate {
		ik, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "evs test SNS intermediate"},
			NotBefore: now.AddDate(-2, 0, 0), NotAfter: now.AddDate(2, 0, 0),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &ik.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		issuerDER = der
		s.mu.Unlock()
		issuer, _ = x509.ParseCertificate(der)
		issuerKey = ik
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s.key = key
	name := "sns.amazonaws.com"
	if o.OtherName != "" {
		name = o.OtherName
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: now.AddDate(0, -2, 0), NotAfter: now.AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if o.Intermediate {
		leaf.IssuingCertificateURL = []string{s.srv.URL + "/issuer.cer"}
	}
	if o.Expired {
		leaf.NotBefore, leaf.NotAfter = now.AddDate(-2, 0, 0), now.AddDate(-1, 0, 0)
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, issuer, &key.PublicKey, issuerKey)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER})
	s.mu.Unlock()
	s.Client = s.srv.Client()
	u, _ := url.Parse(s.srv.URL)
	s.Host = u.Host
	s.CertURL = s.srv.URL + "/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem"
	return s
}

// Confirmed returns the tokens of the subscriptions confirmed so far.
func (s *SNS) Confirmed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.confirmed...)
}

// SNSMessageFields are the fields of a message to sign; Type, Timestamp
// and MessageId get the documentation's sample values when empty.
type SNSMessageFields struct {
	Type, MessageID, Token, TopicArn, Subject, Message, Timestamp string
	HasSubject                                                    bool
	SubscribeURL, UnsubscribeURL                                  string
	// SignatureVersion is "1" or "2" (default "2"); CertURL replaces the
	// stand-in's.
	SignatureVersion, CertURL string
}

// snsJSON is a message in the order of the documentation's samples.
type snsJSON struct {
	Type             string  `json:"Type"`
	MessageID        string  `json:"MessageId"`
	Token            string  `json:"Token,omitempty"`
	TopicArn         string  `json:"TopicArn"`
	Subject          *string `json:"Subject,omitempty"`
	Message          string  `json:"Message"`
	SubscribeURL     string  `json:"SubscribeURL,omitempty"`
	Timestamp        string  `json:"Timestamp"`
	SignatureVersion string  `json:"SignatureVersion"`
	Signature        string  `json:"Signature"`
	SigningCertURL   string  `json:"SigningCertURL"`
	UnsubscribeURL   string  `json:"UnsubscribeURL,omitempty"`
}

// Sign returns the message as SNS posts it, signed.
func (s *SNS) Sign(f SNSMessageFields) []byte {
	if f.Type == "" {
		f.Type = "Notification"
	}
	if f.MessageID == "" {
		f.MessageID = "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324"
	}
	if f.Timestamp == "" {
		f.Timestamp = "2012-05-02T00:54:06.655Z"
	}
	if f.SignatureVersion == "" {
		f.SignatureVersion = "2"
	}
	if f.CertURL == "" {
		f.CertURL = s.CertURL
	}
	// The canonical string, written out here from AWS's documentation
	// rather than taken from the code under test.
	var b strings.Builder
	add := func(k, v string) { b.WriteString(k + "\n" + v + "\n") }
	if f.Type == "Notification" {
		add("Message", f.Message)
		add("MessageId", f.MessageID)
		if f.HasSubject || f.Subject != "" {
			add("Subject", f.Subject)
		}
		add("Timestamp", f.Timestamp)
		add("TopicArn", f.TopicArn)
		add("Type", f.Type)
	} else {
		add("Message", f.Message)
		add("MessageId", f.MessageID)
		add("SubscribeURL", f.SubscribeURL)
		add("Timestamp", f.Timestamp)
		add("Token", f.Token)
		add("TopicArn", f.TopicArn)
		add("Type", f.Type)
	}
	var sig []byte
	var err error
	if f.SignatureVersion == "1" {
		d := sha1.Sum([]byte(b.String())) //nolint:gosec
		sig, err = rsa.SignPKCS1v15(rand.Reader, s.key, crypto.SHA1, d[:])
	} else {
		d := sha256.Sum256([]byte(b.String()))
		sig, err = rsa.SignPKCS1v15(rand.Reader, s.key, crypto.SHA256, d[:])
	}
	if err != nil {
		panic(err)
	}
	m := snsJSON{Type: f.Type, MessageID: f.MessageID, Token: f.Token, TopicArn: f.TopicArn, Message: f.Message,
		SubscribeURL: f.SubscribeURL, Timestamp: f.Timestamp, SignatureVersion: f.SignatureVersion,
		Signature: base64.StdEncoding.EncodeToString(sig), SigningCertURL: f.CertURL, UnsubscribeURL: f.UnsubscribeURL}
	if f.HasSubject || f.Subject != "" {
		m.Subject = &f.Subject
	}
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		panic(err)
	}
	return out
}

// SubscribeURL is the stand-in's confirmation URL for token on topic, in
// the form of the documentation's sample.
func (s *SNS) SubscribeURL(topic, token string) string {
	return "https://" + s.Host + "/?Action=ConfirmSubscription&TopicArn=" + url.QueryEscape(topic) + "&Token=" + url.QueryEscape(token)
}
