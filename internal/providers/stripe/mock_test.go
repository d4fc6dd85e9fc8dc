package stripe_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// stripeMockVersion is the stripe-mock the adapter is tested against.
const stripeMockVersion = "v0.203.0"

// The stripe-mock process shared by the package's tests: started by the
// first test that needs it, stopped by TestMain.
var mock struct {
	once sync.Once
	cmd  *exec.Cmd
	url  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if mock.cmd != nil && mock.cmd.Process != nil {
		_ = mock.cmd.Process.Kill()
		_ = mock.cmd.Wait()
	}
	os.Exit(code)
}

// stripeMock returns the base URL of a running stripe-mock. When it cannot be
// installed or started the test is skipped, or fails when
// GATEHOUSE_REQUIRE_SERVICES=1 (make test and CI).
func stripeMock(t *testing.T) string {
	t.Helper()
	mock.once.Do(func() { mock.url, mock.err = startStripeMock() })
	if mock.err != nil {
		if os.Getenv("GATEHOUSE_REQUIRE_SERVICES") == "1" {
			t.Fatalf("stripe-mock: %v", mock.err)
		}
		t.Skipf("stripe-mock: %v (set GATEHOUSE_REQUIRE_SERVICES=1 to fail instead)", mock.err)
	}
	return mock.url
}

// stripeMockBinary returns the path of stripe-mock, installing it with
// `go install` into the user's cache directory when it is not there yet.
// STRIPE_MOCK_BIN names a binary to use instead.
func stripeMockBinary() (string, error) {
	if bin := os.Getenv("STRIPE_MOCK_BIN"); bin != "" {
		return bin, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory: %w", err)
	}
	dir := filepath.Join(cache, "gatehouse", "tools", "stripe-mock@"+stripeMockVersion)
	bin := filepath.Join(dir, "stripe-mock")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("go not on PATH to install stripe-mock: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "install", "github.com/stripe/stripe-mock@"+stripeMockVersion)
	// Outside any module and workspace; GOFLAGS such as -mod=vendor would refuse pkg@version.
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install github.com/stripe/stripe-mock@%s: %v\n%s", stripeMockVersion, err, out)
	}
	return bin, nil
}

// startStripeMock starts stripe-mock on loopback ports the kernel picks (an
// empty port in -http-addr / -https-addr), so parallel test binaries never
// race for a port, reads the HTTP address from its output and waits until it
// answers.
func startStripeMock() (string, error) {
	bin, err := stripeMockBinary()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:", "-https-addr", "127.0.0.1:")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = cmd.Stdout // the pipe's write end: both streams are read below
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	mock.cmd = cmd

	const prefix = "Listening for HTTP at address: "
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				select {
				case addr <- strings.TrimSpace(a):
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case <-time.After(30 * time.Second):
		return "", errors.New("stripe-mock printed no HTTP address within 30s")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/balance", nil)
		req.Header.Set("Authorization", "Bearer sk_test_123")
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return base, nil
			}
			err = fmt.Errorf("status %d", res.StatusCode)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("stripe-mock at %s does not answer: %v", base, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
