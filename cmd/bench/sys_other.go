//go:build !linux

package main

import (
	"os/exec"
	"time"
)

func preciseSleep(d time.Duration) { time.Sleep(d) }

func boostThread() (restore func()) { return func() {} }

func dieWithParent(*exec.Cmd) {}
