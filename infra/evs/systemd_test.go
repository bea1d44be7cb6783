package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/evs-dev/evs/internal/config"
)

// TestSystemdUnit: infra/systemd/evs.service runs evs serve as a user of
// its own with a private state directory and the hardening options, sets
// only variables evs reads, and systemd-analyze verify finds nothing to
// say about it (with ExecStart pointed at a file that exists here).
func TestSystemdUnit(t *testing.T) {
	unit, err := os.ReadFile(filepath.Join("..", "systemd", "evs.service"))
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string][]string{}
	for _, l := range strings.Split(string(unit), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			lines[k] = append(lines[k], v)
		}
	}
	for _, want := range []string{
		"ExecStart=/usr/local/bin/evs serve", "User=evs", "StateDirectory=evs", "StateDirectoryMode=0700", "UMask=0077",
		"Environment=EVS_DATA_DIR=/var/lib/evs", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes",
		"PrivateTmp=yes", "CapabilityBoundingSet=", "RestrictNamespaces=yes", "SystemCallFilter=@system-service",
	} {
		k, v, _ := strings.Cut(want, "=")
		if !slices.Contains(lines[k], v) {
			t.Errorf("the unit has no %s", want)
		}
	}
	if af := strings.Join(lines["RestrictAddressFamilies"], " "); !strings.Contains(af, "AF_INET ") || !strings.Contains(af, "AF_INET6") {
		t.Errorf("RestrictAddressFamilies=%s", af)
	}
	for _, env := range lines["Environment"] {
		if name, _, _ := strings.Cut(env, "="); !slices.Contains(config.Known, name) {
			t.Errorf("the unit sets %s, which evs does not read", name)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the unit's syntax was not verified")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "evs.service")
	here := regexp.MustCompile(`(?m)^ExecStart=\S+`).ReplaceAllString(string(unit), "ExecStart="+self)
	if err := os.WriteFile(path, []byte(here), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
