//go:build linux

package harness

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the child get SIGKILL when the process that started
// it dies.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
