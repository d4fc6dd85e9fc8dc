package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// browserTools returns the folder of the browser journeys with playwright-core
// installed (deploy/local/tools.sh does it) and the chromium to drive. Without
// them the test is skipped, or fails under GATEHOUSE_REQUIRE_SERVICES=1.
func browserTools(t *testing.T) (dir, chromium string) {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("GATEHOUSE_REQUIRE_SERVICES") == "1" {
			t.Fatalf(format+" (deploy/local/tools.sh installs it)", args...)
		}
		t.Skipf(format+" (set GATEHOUSE_REQUIRE_SERVICES=1 to fail instead)", args...)
	}
	if _, err := exec.LookPath("node"); err != nil {
		unavailable("node is not on PATH: %v", err)
	}
	chromium = os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		unavailable("no chromium at %s: %v", chromium, err)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(root, "internal", "e2e", "browser")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err != nil {
		unavailable("playwright-core is not installed in %s: %v", dir, err)
	}
	return dir, chromium
}

// screenshotDir is where the browser journeys leave their screenshots:
// $GATEHOUSE_SCREENSHOTS, or bin/screenshots of the checkout.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GATEHOUSE_SCREENSHOTS")
	if dir == "" {
		root, err := moduleRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, "bin", "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCheckoutInABrowser is the card-collection journey of CONTRACT.md,
// "Client-side card collection", in Debian's chromium: the example checkout
// (examples/checkout) on a second loopback origin mounts the card field of
// the real API, the card is typed into the field, the page gets a token and
// the example's server charges it with the secret key; the worker captures it.
// Only the card field ever sends the card number, and only to the gateway.
func TestCheckoutInABrowser(t *testing.T) {
	dir, chromium := browserTools(t)
	shots := screenshotDir(t)
	st := newStack(t, stackOptions{}, "browser")
	setup := newClient(t, "127.0.0.40")
	_, token := st.signUp(t, setup, "browser", "Browser Shop")
	key := st.newKey(t, setup, token, "checkout")
	if !strings.HasPrefix(key.PublicKey, "pk_test_") {
		t.Fatalf("no public key in the key's creation answer")
	}

	// The example checkout, built and started on its own port: another origin.
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "checkout")
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	build := exec.Command(goTool, "build", "-o", bin, "./examples/checkout")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/checkout: %v\n%s", err, out)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	checkout := exec.Command(bin)
	checkout.Env = append(os.Environ(), "GATEHOUSE_API="+st.replicas[0], "GATEHOUSE_PUBLIC_KEY="+key.PublicKey,
		"GATEHOUSE_SECRET_KEY="+key.SecretKey, "CHECKOUT_ADDR="+addr)
	var checkoutLog strings.Builder
	checkout.Stdout, checkout.Stderr = &checkoutLog, &checkoutLog
	if err := checkout.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = checkout.Process.Kill()
		_ = checkout.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the example checkout did not listen on %s: %v\n%s", addr, err, checkoutLog.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	run := exec.CommandContext(ctx, "node", "checkout.mjs", "http://"+addr+"/", shots)
	run.Dir = dir
	run.Env = append(os.Environ(), "CHROMIUM="+chromium)
	var stderr strings.Builder
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("node checkout.mjs: %v\n%s\ncheckout log:\n%s", err, stderr.String(), checkoutLog.String())
	}
	var got struct {
		Result         string `json:"result"`
		Charge         string `json:"charge"`
		PageReadsField bool   `json:"pageReadsField"`
		CardSentBy     []struct {
			Frame, URL string
		} `json:"cardSentBy"`
		PageErrors []string `json:"pageErrors"`
		TookMS     int64    `json:"took_ms"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("checkout.mjs printed %q: %v", out, err)
	}
	t.Logf("checkout journey in chromium: %d ms; screenshots in %s", got.TookMS, shots)
	if got.Charge == "" || len(got.PageErrors) > 0 {
		t.Fatalf("the page shows %q, page errors %q", got.Result, got.PageErrors)
	}
	if got.PageReadsField {
		t.Error("the checkout page could read the card field's document")
	}
	if len(got.CardSentBy) != 1 || got.CardSentBy[0].Frame != "card field" || got.CardSentBy[0].URL != st.replicas[0]+"/v1/tokens" {
		t.Errorf("the card number was sent by %+v; want only the card field, to %s/v1/tokens", got.CardSentBy, st.replicas[0])
	}

	// The charge is the merchant's, made from the token, and the worker captures it.
	p := &payments{st: st, c: setup, key: key.SecretKey}
	final, _ := p.waitCharges(t, []string{got.Charge}, func(_, status string) bool { return status != "created" }, 20*time.Second)
	if c := final[got.Charge]; c.Status != "captured" || c.Card.Last4 == nil || *c.Card.Last4 != "4242" {
		t.Fatalf("the checkout's charge: %+v", c)
	}
	for _, name := range []string{"checkout-filled.png", "checkout-paid.png"} {
		if fi, err := os.Stat(filepath.Join(shots, name)); err != nil || fi.Size() < 1000 {
			t.Errorf("screenshot %s: %v", name, err)
		}
	}
	checkNoCardData(t, st)
}
