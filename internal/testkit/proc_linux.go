package testkit

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts the server in its own process group, so kill reaches the
// Python process behind a launcher script, and has the kernel kill it when
// the test binary dies without calling Stop.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// kill stops the server's whole process group.
func kill(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
