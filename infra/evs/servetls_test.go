package main

import (
	"context"
	"crypto/tls"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/testkit"
)

// TestServeTLS: with EVS_TLS_CERT and EVS_TLS_KEY, `evs serve` says it
// listens on https:// and answers there with the certificate, which
// verifies against its CA; a certificate it cannot load stops the start
// with one line naming the file, before any key is made.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ca := testkit.NewCA(t, "evs test CA")
	ca.Issue(t, 7, certFile, keyFile)
	env := map[string]string{"EVS_DATA_DIR": filepath.Join(dir, "data"), "EVS_ADDR": "127.0.0.1:0", "EVS_SMTP": "off", "EVS_DNS_SERVERS": "127.0.0.1:9",
		"EVS_TLS_CERT": certFile, "EVS_TLS_KEY": keyFile}

	bad := map[string]string{}
	for k, v := range env {
		bad[k] = v
	}
	bad["EVS_TLS_CERT"] = filepath.Join(dir, "missing.pem")
	code, out, stderr := runEVS(context.Background(), bad, "serve")
	if code != 1 || out != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, "missing.pem") {
		t.Fatalf("a missing certificate file: exit %d, stdout %q, stderr %q; want exit 1 and one line naming it", code, out, stderr)
	}
	if _, err := os.Stat(env["EVS_DATA_DIR"]); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the data directory was made before the certificate was loaded: %v", err)
	}

	srv := serveInProcess(t, env)
	m := regexp.MustCompile(`listening on (https://[0-9.:]+)`).FindStringSubmatch(srv.out.String())
	if m == nil {
		t.Fatalf("not listening on https://: %q", srv.out.String())
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
	resp, err := c.Get(m[1] + "/readyz")
	if err != nil {
		t.Fatalf("HTTPS /readyz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS.PeerCertificates[0].SerialNumber.Int64() != 7 {
		t.Fatalf("HTTPS /readyz: %d, serial %v", resp.StatusCode, resp.TLS.PeerCertificates[0].SerialNumber)
	}
	if code := srv.stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, srv.errOut.String())
	}
}
