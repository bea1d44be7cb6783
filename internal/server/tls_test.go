package server_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evs-dev/evs/internal/server"
	"github.com/evs-dev/evs/internal/testkit"
)

// TestTLS: with EVS_TLS_CERT and EVS_TLS_KEY the API answers HTTPS with a
// certificate that verifies against its CA; after the files are replaced
// and SIGHUP arrives, new connections get the new certificate; a bad file
// on reload keeps the certificate served so far and logs an error.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	oldCA, newCA := testkit.NewCA(t, "old CA"), testkit.NewCA(t, "new CA")
	oldCA.Issue(t, 100, certFile, keyFile)
	cert, err := server.LoadCertificate(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, options{server: func(o *server.Options) { o.TLS = cert }})
	base := "https://" + strings.TrimPrefix(h.base, "http://")
	hup := make(chan os.Signal)
	reloads := &testkit.LogBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go cert.ReloadOn(ctx, hup, slog.New(slog.NewJSONHandler(reloads, nil)))

	// do calls the API with a client that trusts only ca, on a new
	// connection, and returns the status, the reply and the serial of the
	// certificate it was shown.
	do := func(ca *testkit.CA, path, body string) (int, string, int64, error) {
		t.Helper()
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}, DisableKeepAlives: true}}
		hr, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		hr.Header.Set("X-Api-Key", h.testKey)
		hr.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(hr)
		if err != nil {
			return 0, "", 0, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.TLS.PeerCertificates[0].SerialNumber.Int64(), nil
	}
	get := func(ca *testkit.CA) (int, int64, error) {
		t.Helper()
		status, body, serial, err := do(ca, "/v1/verify", `{"email":"accepted_email@x.example"}`)
		if status == 200 && !strings.Contains(body, `"deliverable"`) {
			t.Fatalf("reply over HTTPS: %s", body)
		}
		return status, serial, err
	}
	if status, serial, err := get(oldCA); err != nil || status != 200 || serial != 100 {
		t.Fatalf("HTTPS with the first certificate: %d serial %d %v", status, serial, err)
	}
	// An upload's URL is on the origin called: https.
	if status, body, _, err := do(oldCA, "/v1/uploads", `{"contentType":"text/csv"}`); err != nil || status != 201 || !strings.Contains(body, `"url":"`+base+`/v1/uploads/`) {
		t.Fatalf("upload over HTTPS: %d %s %v", status, body, err)
	}
	if _, err := http.Get(h.base + server.HealthPath); err == nil {
		t.Fatal("plain HTTP answered on the HTTPS listener")
	}

	newCA.Issue(t, 200, certFile, keyFile)
	hup <- syscall.SIGHUP
	waitFor(t, "the reload's log line", func() bool { return strings.Contains(reloads.String(), "TLS certificate reloaded") })
	if status, serial, err := get(newCA); err != nil || status != 200 || serial != 200 {
		t.Fatalf("after SIGHUP: %d serial %d %v", status, serial, err)
	}
	if _, _, err := get(oldCA); err == nil {
		t.Fatal("the old CA still verifies the server after the reload")
	}

	if err := os.WriteFile(certFile, []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hup <- syscall.SIGHUP
	waitFor(t, "the failed reload's log line", func() bool { return strings.Contains(reloads.String(), "not reloaded") })
	if !strings.Contains(reloads.String(), `"level":"ERROR"`) || !strings.Contains(reloads.String(), certFile) {
		t.Fatalf("the failed reload's line: %s", reloads.String())
	}
	if status, serial, err := get(newCA); err != nil || status != 200 || serial != 200 {
		t.Fatalf("after a bad reload: %d serial %d %v, want the previous certificate", status, serial, err)
	}
}
