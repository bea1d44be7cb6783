package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"
)

// Certificate is the TLS certificate `evs serve` answers HTTPS with
// (EVS_TLS_CERT, EVS_TLS_KEY), read again by Reload (on SIGHUP). A reload
// that fails keeps the certificate served so far.
type Certificate struct {
	certFile, keyFile string
	cur               atomic.Pointer[tls.Certificate]
}

// LoadCertificate reads the PEM certificate chain and private key files;
// an error names the files and what is wrong, in one line.
func LoadCertificate(certFile, keyFile string) (*Certificate, error) {
	c := &Certificate{certFile: certFile, keyFile: keyFile}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the files again and serves what they hold from the next
// handshake on; on error the certificate served so far stays.
func (c *Certificate) Reload() error {
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("EVS_TLS_CERT %s and EVS_TLS_KEY %s: %w", c.certFile, c.keyFile, err)
	}
	c.cur.Store(&pair) // with its Leaf, which LoadX509KeyPair fills in since Go 1.23
	return nil
}

// Leaf is the certificate served now.
func (c *Certificate) Leaf() *x509.Certificate { return c.cur.Load().Leaf }

// TLSConfig is the server side of TLS with the current certificate:
// TLS 1.2 or later, HTTP/1.1 only (the edge follows HTTP/1.1 framing
// on the connection itself; framing.go).
func (c *Certificate) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.cur.Load(), nil
		},
	}
}

// ReloadOn reloads the certificate whenever signals delivers (SIGHUP in
// `evs serve`) until ctx ends, and logs each outcome: what is served now,
// or why the files were refused and that the previous certificate stays.
func (c *Certificate) ReloadOn(ctx context.Context, signals <-chan os.Signal, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-signals:
		}
		if err := c.Reload(); err != nil {
			logger.Error("TLS certificate not reloaded; still serving the previous one", slog.String("error", err.Error()),
				slog.Time("notAfter", c.Leaf().NotAfter))
			continue
		}
		logger.Info("TLS certificate reloaded", certAttrs(c.Leaf())...)
	}
}

// certAttrs describe a certificate in a log line.
func certAttrs(leaf *x509.Certificate) []any {
	return []any{slog.String("subject", leaf.Subject.String()), slog.String("serial", leaf.SerialNumber.String()),
		slog.Time("notAfter", leaf.NotAfter.UTC().Truncate(time.Second))}
}

// LogCertificate says at start which certificate is served, and warns when
// it has expired or expires within 14 days.
func LogCertificate(logger *slog.Logger, c *Certificate, now time.Time) {
	leaf := c.Leaf()
	switch left := leaf.NotAfter.Sub(now); {
	case left <= 0:
		logger.Warn("the TLS certificate has expired: clients will refuse it; renew it and send SIGHUP", certAttrs(leaf)...)
	case left < 14*24*time.Hour:
		logger.Warn("the TLS certificate expires within 14 days; renew it and send SIGHUP", certAttrs(leaf)...)
	default:
		logger.Info("serving HTTPS", certAttrs(leaf)...)
	}
}
