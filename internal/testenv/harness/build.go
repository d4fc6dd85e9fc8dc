package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// ModuleRoot walks up from the working directory to the directory holding
// go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// GoTool is the go command on PATH; go test puts its own toolchain's first.
func GoTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go" // the error comes from running it, naming the command
}

// Built is a set of commands built by Build.
type Built struct {
	Dir  string        // the temporary directory holding the binaries
	Took time.Duration // how long the build took
	err  error
	once sync.Once
}

// Path is the binary of the command whose package directory is named name
// (api for ./cmd/api).
func (b *Built) Path(name string) string { return filepath.Join(b.Dir, name) }

var (
	buildsMu sync.Mutex
	builds   = map[string]*Built{}
)

// Build builds the packages, given as paths relative to the module root
// (./cmd/api), with the go build flags (such as -race) into one temporary
// directory. It builds once per process for the same flags and packages:
// later calls wait for the first one and share its result. RemoveBuilds
// removes the directories.
func Build(flags []string, pkgs ...string) (*Built, error) {
	key := strings.Join(flags, " ") + "\x00" + strings.Join(pkgs, " ")
	buildsMu.Lock()
	b, ok := builds[key]
	if !ok {
		b = &Built{}
		builds[key] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() {
		start := time.Now()
		defer func() { b.Took = time.Since(start) }()
		root, err := ModuleRoot()
		if err != nil {
			b.err = err
			return
		}
		dir, err := os.MkdirTemp("", "gatehouse-build-")
		if err != nil {
			b.err = err
			return
		}
		b.Dir = dir
		args := append(append([]string{"build"}, flags...), "-o", dir+string(os.PathSeparator))
		cmd := exec.Command(GoTool(), append(args, pkgs...)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", strings.Join(append(slices.Clone(flags), pkgs...), " "), err, out)
		}
	})
	if b.err != nil {
		return nil, b.err
	}
	return b, nil
}

// RemoveBuilds removes every directory Build has made; for TestMain, once
// the tests have run.
func RemoveBuilds() {
	buildsMu.Lock()
	defer buildsMu.Unlock()
	for key, b := range builds {
		if b.Dir != "" {
			_ = os.RemoveAll(b.Dir)
		}
		delete(builds, key)
	}
}
