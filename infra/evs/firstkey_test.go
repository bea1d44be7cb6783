package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestFirstKeyWithoutATerminal: a first start whose stdout is a pipe (as
// under systemd) writes a live account's key to a 0600 file in the data
// directory and logs that file's path, never the key; the key in the file
// works. A test-mode account's key (make run's) is printed on stdout,
// pipe or not, with the example call, and never logged.
func TestFirstKeyWithoutATerminal(t *testing.T) {
	bin := buildEVS(t)
	env := func(dir string) []string {
		return []string{"EVS_DATA_DIR=" + dir, "EVS_SMTP=off", "EVS_DNS_SERVERS=127.0.0.1:9", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	}
	// SMTP on, as make run has it, with no HELO name set: a store of
	// sandbox accounts never probes, so nothing is said about the HELO.
	sandboxEnv := slices.DeleteFunc(env(t.TempDir()), func(v string) bool { return v == "EVS_SMTP=off" })
	sandbox := startServe(t, bin, sandboxEnv, "--test-account")
	out := sandbox.out.Await(t, 10*time.Second, "the sign-up widget line", func(s string) bool { return strings.Contains(s, "sign-up widget: ") })
	if strings.Contains(sandbox.err.String(), "HELO") {
		t.Errorf("a sandbox-only start warns about the HELO name:\n%s", sandbox.err.String())
	}
	anyKey := regexp.MustCompile(`evs\.[A-Za-z0-9_-]{43}`)
	key := anyKey.FindString(out)
	if key == "" || !strings.Contains(out, "curl -s "+sandbox.base+"/v1/verify") || anyKey.MatchString(sandbox.err.String()) {
		t.Fatalf("a test-mode first key on a pipe: want it and the curl line on stdout only\nstdout:\n%s\nstderr:\n%s", out, sandbox.err.String())
	}
	if status, body := call(t, key, "POST", sandbox.base+"/v1/verify", `{"email":"alice+rejected_email@example.com"}`); status != 200 {
		t.Fatalf("the printed key: %d %s", status, body)
	}

	dir := t.TempDir()
	p := startServe(t, bin, env(dir))
	// stdout and the log are two pipes: each is awaited on its own.
	p.out.Await(t, 10*time.Second, "the sign-up widget line", func(s string) bool { return strings.Contains(s, "sign-up widget: ") })
	path := filepath.Join(dir, firstKeyName)
	p.err.Await(t, 10*time.Second, "the log naming "+path, func(s string) bool { return strings.Contains(s, path) })
	if anyKey.MatchString(p.out.String()) || anyKey.MatchString(p.err.String()) {
		t.Fatalf("a live key was written to stdout or stderr:\n%s\n%s", p.out.String(), p.err.String())
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v, %v; want mode 0600", fi, err)
	}
	b, _ := os.ReadFile(path)
	key = strings.TrimSpace(string(b))
	if !keyRE.MatchString(key) {
		t.Fatalf("the key file holds %q", b)
	}
	// A call only a valid key gets past authentication for.
	if status, body := call(t, key, "GET", p.base+"/v1/requests/00000000-0000-4000-8000-000000000000", ""); status != 404 {
		t.Fatalf("the key from the file: %d %s; want 404 (authenticated, no such request)", status, body)
	}
}
