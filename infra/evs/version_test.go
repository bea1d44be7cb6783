package main

import (
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestBuiltBinarySaysWhatItIs: `evs version` of a built binary names the
// revision and modified flag the toolchain recorded in it (as `go version
// -m` reads them), its /metrics exports the same in evs_build_info, and
// its serve names, at start, the EVS_* variable it does not know with the
// nearest one it does (one build for the three: building is slow).
func TestBuiltBinarySaysWhatItIs(t *testing.T) {
	bin := buildEVS(t)
	m, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	setting := func(key string) string {
		if s := regexp.MustCompile(`(?m)^\s*build\s+` + regexp.QuoteMeta(key) + `=(\S+)$`).FindSubmatch(m); s != nil {
			return string(s[1])
		}
		return ""
	}
	rev, label := setting("vcs.revision"), ""
	if rev == "" {
		rev = "unknown"
	}
	label = rev
	if setting("vcs.modified") == "true" {
		rev += " (modified)"
		label += "-modified"
	}
	goVersion := strings.Fields(strings.SplitN(string(m), "\n", 2)[0])[1]

	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("evs version: %v", err)
	}
	if want := "evs dev\nrevision " + rev + "\n" + goVersion + "\n"; string(out) != want {
		t.Fatalf("evs version printed %q, want %q", out, want)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	maddr := ln.Addr().String()
	ln.Close()
	p := startServe(t, bin, []string{"EVS_DATA_DIR=" + t.TempDir(), "EVS_SMTP=off", "EVS_DNS_SERVERS=127.0.0.1:9",
		"EVS_METRICS_ADDR=" + maddr, "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "EVS_RATELIMIT=5"})
	if w := "EVS_RATELIMIT is not a variable evs reads, and is ignored; did you mean EVS_RATE_LIMIT?"; strings.Count(p.err.String(), w) != 1 {
		t.Errorf("serve's start does not warn once %q:\n%s", w, p.err.String())
	}
	if strings.Contains(p.err.String(), "EVS_SMTP ") || strings.Contains(p.err.String(), "EVS_DATA_DIR ") {
		t.Errorf("serve warns about a variable it reads:\n%s", p.err.String())
	}
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `evs_build_info{goversion="` + goVersion + `",revision="` + label + `",version="dev"} 1`
	if !strings.Contains(string(body), want+"\n") {
		t.Fatalf("/metrics has no %s", want)
	}
}
