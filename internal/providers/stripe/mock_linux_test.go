package stripe_test

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal kills stripe-mock with the test binary, even when a
// test panics or times out before TestMain can stop it.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
