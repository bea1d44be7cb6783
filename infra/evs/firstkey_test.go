package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestFirstKeyWithoutATerminal: a first start whose stdout is a pipe (as
// under systemd) writes the key to a 0600 file in the data directory and
// logs that file's path, never the key; the key in the file works.
func TestFirstKeyWithoutATerminal(t *testing.T) {
	bin := buildEVS(t)
	dir := t.TempDir()
	p := startServe(t, bin, []string{"EVS_DATA_DIR=" + dir, "EVS_SMTP=off", "EVS_DNS_SERVERS=127.0.0.1:9",
		"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, "--test-account")
	if k := regexp.MustCompile(`evs\.[A-Za-z0-9_-]{43}`); k.MatchString(p.out.String()) || k.MatchString(p.err.String()) {
		t.Fatalf("the key was written to stdout or stderr:\n%s\n%s", p.out.String(), p.err.String())
	}
	path := filepath.Join(dir, firstKeyName)
	if !strings.Contains(p.err.String(), path) {
		t.Fatalf("the log does not name %s:\n%s", path, p.err.String())
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v, %v; want mode 0600", fi, err)
	}
	b, _ := os.ReadFile(path)
	key := strings.TrimSpace(string(b))
	if !keyRE.MatchString(key) {
		t.Fatalf("the key file holds %q", b)
	}
	if status, body := call(t, key, "POST", p.base+"/v1/verify", `{"email":"alice+rejected_email@example.com"}`); status != 200 {
		t.Fatalf("the key from the file: %d %s", status, body)
	}
}
