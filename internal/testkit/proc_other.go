//go:build !linux

package testkit

import (
	"os/exec"
	"syscall"
)

// sysProcAttr: without a parent-death signal elsewhere, only Stop ends the
// server.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// kill stops the server process.
func kill(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
