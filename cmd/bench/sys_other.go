//go:build !linux

package main

import (
	"time"
)

func preciseSleep(d time.Duration) { time.Sleep(d) }

func boostThread() (restore func()) { return func() {} }
