//go:build !linux

package stripe_test

import "os/exec"

// setParentDeathSignal does nothing where Linux's parent-death signal is missing.
func setParentDeathSignal(*exec.Cmd) {}
