package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

var jsonUnmarshal = json.Unmarshal

// spinner shows that a command waits. It draws only on a terminal; when
// the output is a file or a pipe it prints its message once.
type spinner struct {
	w       io.Writer
	msg     string
	tty     bool
	mu      sync.Mutex
	paused  bool
	stopped chan struct{}
	once    sync.Once
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func newSpinner(w io.Writer, msg string) *spinner {
	s := &spinner{w: w, msg: msg, tty: isTerminal(w), stopped: make(chan struct{})}
	if !s.tty {
		fmt.Fprintln(w, msg+"...")
		return s
	}
	go func() {
		frames := []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-s.stopped:
				return
			case <-t.C:
			}
			s.mu.Lock()
			if !s.paused {
				fmt.Fprintf(w, "\r%s %s", frames[i%len(frames)], s.msg)
			}
			s.mu.Unlock()
		}
	}()
	return s
}

// pause clears the spinner's line so that other output can be printed.
func (s *spinner) pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tty && !s.paused {
		fmt.Fprint(s.w, "\r\033[K")
	}
	s.paused = true
}

func (s *spinner) resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = false
}

func (s *spinner) stop() {
	s.once.Do(func() {
		s.pause()
		close(s.stopped)
	})
}
