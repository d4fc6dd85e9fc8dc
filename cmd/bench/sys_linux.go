//go:build linux

package main

import (
	"syscall"
	"time"
)

// preciseSleep sleeps d with nanosleep(2). The Go timer wheel wakes up to a
// millisecond late on Linux, which an open-model generator would add to every
// latency it measures; the dispatcher runs on a locked thread and sleeps here.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}

// boostThread raises the calling (locked) thread's priority, so the
// dispatcher keeps its timetable on a saturated machine; it only dispatches,
// the requests run on other threads at normal priority. Without the
// privilege it does nothing. It returns the function that restores the
// thread's priority.
func boostThread() (restore func()) {
	tid := syscall.Gettid()
	old, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid)
	if err != nil || syscall.Setpriority(syscall.PRIO_PROCESS, tid, -10) != nil {
		return func() {}
	}
	// The raw getpriority(2) returns 20 - nice.
	return func() { _ = syscall.Setpriority(syscall.PRIO_PROCESS, tid, 20-old) }
}
