package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// cloneTest is the end-to-end test the fresh checkout runs: one of the
// shortest whose stack reaches PostgreSQL through PgBouncer.
const cloneTest = "TestIdempotentCreationAcrossReplicas"

// TestFreshCheckoutInPrivateDirectory is a new user's first make test, as
// root, in a checkout under a directory only its owner may enter (mktemp -d,
// or a clone under /root): the checkout's files (tracked, and untracked but
// not ignored, as they are in the working tree; no bin/, .dev/ or
// node_modules) are copied under a new 0700 directory, where
// deploy/local/testenv.sh installs the tools (links in bin/tools, npm ci)
// and runs one end-to-end test whose stack goes through PgBouncer. As root
// PgBouncer runs as postgres, who cannot enter that directory: it must run
// from its installed file, with its files in a directory of its own. Not as
// root the test runs too (and passes: nothing runs as another user).
//
// The copy uses the services of this run (TEST_DATABASE_URL,
// TEST_REDIS_URL) and Go's build cache. Its go test runs with -race and
// -trimpath, as make test does, so that the packages it compiles are the
// ones this run compiled, cached under their module path rather than under
// the copy's directory, which is new each time: it mostly links.
func TestFreshCheckoutInPrivateDirectory(t *testing.T) {
	parallel(t)
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git is not on PATH: %v", err)
	}
	files, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Skipf("%s is not a git checkout (git ls-files: %v): nothing to copy as a clone", root, err)
	}

	parent, err := os.MkdirTemp("", "gatehouse-clone-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	if fi, err := os.Stat(parent); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o700 {
		t.Fatalf("the private directory %s has mode %v, want 0700", parent, fi.Mode().Perm())
	}
	clone := filepath.Join(parent, "gatehouse")
	start := time.Now()
	n := copyCheckout(t, root, clone, strings.Split(strings.TrimRight(string(files), "\x00"), "\x00"))
	for _, p := range []string{"bin", ".dev", "internal/e2e/browser/node_modules",
		"internal/webhooks/testdata/verify/node_modules", "examples/typescript/node_modules",
		"internal/providers/adyen/testdata/prism/node_modules"} {
		if _, err := os.Lstat(filepath.Join(clone, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the copy has %s (%v): it must start without it", p, err)
		}
	}
	t.Logf("copied %d files of %s to %s in %s", n, root, clone, time.Since(start).Round(time.Millisecond))

	ctx := context.Background()
	if deadline, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-30*time.Second))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "bash", "deploy/local/testenv.sh", "env", "GATEHOUSE_REQUIRE_SERVICES=1",
		"go", "test", "-race", "-count=1", "-v", "-run", "^"+cloneTest+"$", "./internal/e2e")
	cmd.Dir = clone
	cmd.Env = cloneEnv()
	// Its own process group, killed whole (go test, the test binary and
	// what it started) when the time is up or this process dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer // one writer: exec writes both streams from one goroutine
	cmd.Stdout, cmd.Stderr = &out, &out
	start = time.Now()
	err = cmd.Run()
	took := time.Since(start)
	output := out.String()
	tail := output
	if len(tail) > 32<<10 {
		tail = "...\n" + tail[len(tail)-32<<10:]
	}
	if err != nil {
		t.Fatalf("testenv.sh and %s in a fresh checkout under a 0700 directory (%s) failed after %s: %v\n%s", cloneTest,
			clone, took.Round(time.Millisecond), err, tail)
	}
	if !strings.Contains(output, "--- PASS: "+cloneTest+" ") {
		t.Fatalf("%s did not pass in the fresh checkout (no --- PASS line):\n%s", cloneTest, tail)
	}
	if pgbouncerWanted() && !strings.Contains(output, "the stack reaches PostgreSQL through PgBouncer") {
		t.Fatalf("the stack of %s in the fresh checkout did not go through PgBouncer:\n%s", cloneTest, tail)
	}
	t.Logf("in the fresh checkout (root: %t), testenv.sh and %s passed in %s, of which the test %s:\n%s",
		os.Geteuid() == 0, cloneTest, took.Round(time.Millisecond), testTook(output, cloneTest), tail)
}

// copyCheckout copies the files named (relative to root) into dst, as they
// are in the working tree, with their mode; symbolic links stay links. A
// file deleted in the working tree is left out. It returns how many it
// copied.
func copyCheckout(t *testing.T, root, dst string, names []string) int {
	t.Helper()
	n := 0
	for _, name := range names {
		if name == "" {
			continue
		}
		src, to := filepath.Join(root, name), filepath.Join(dst, name)
		fi, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(src)
			if err == nil {
				err = os.Symlink(link, to)
			}
			if err != nil {
				t.Fatal(err)
			}
		case fi.Mode().IsRegular():
			if err := copyFile(src, to, fi.Mode().Perm()); err != nil {
				t.Fatal(err)
			}
		default:
			continue // a submodule's directory
		}
		n++
	}
	return n
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// cloneEnv is the environment of the fresh checkout's make test: this
// one's, with the services of this run and -trimpath added to GOFLAGS.
// testenv.sh puts the copy's bin/tools first on PATH and sets
// STRIPE_MOCK_BIN to the copy's.
func cloneEnv() []string {
	var env []string
	goflags := "-trimpath"
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "TEST_DATABASE_URL", "TEST_REDIS_URL", "STRIPE_MOCK_BIN", "GATEHOUSE_REQUIRE_SERVICES":
			continue
		case "GOFLAGS":
			if !slices.Contains(strings.Fields(v), "-trimpath") {
				v += " " + goflags
			}
			goflags = strings.TrimSpace(v)
			continue
		}
		env = append(env, kv)
	}
	return append(env, "TEST_DATABASE_URL="+testenv.PostgresURL(), "TEST_REDIS_URL="+testenv.RedisURL(), "GOFLAGS="+goflags)
}

// testTook is the time go test -v reported for the test name in out.
func testTook(out, name string) string {
	i := strings.Index(out, "--- PASS: "+name+" (")
	if i < 0 {
		return "?"
	}
	rest := out[i+len("--- PASS: "+name+" ("):]
	if j := strings.IndexByte(rest, ')'); j >= 0 {
		return rest[:j]
	}
	return "?"
}
