package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// verifierDir is internal/webhooks/testdata/verify with its pinned npm
// packages installed (deploy/local/tools.sh), or the test is skipped (fails
// under GATEHOUSE_REQUIRE_SERVICES=1).
func verifierDir(t *testing.T) string {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "internal", "webhooks", "testdata", "verify")
	needNodeModule(t, dir, "standardwebhooks")
	return dir
}

// needNodeModule returns the path of node, with the npm package pkg
// installed in dir/node_modules, or skips the test (fails it under
// GATEHOUSE_REQUIRE_SERVICES=1).
func needNodeModule(t *testing.T, dir, pkg string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node is not on PATH: %v (deploy/local/tools.sh installs it)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
		testenv.Missing(t, "%s is not installed in %s: %v (deploy/local/tools.sh installs it)", pkg, dir, err)
	}
	return node
}

// received is one request the verifying receiver (receive.mjs) got.
type received struct {
	EventID   string `json:"event_id"`
	EventType string `json:"event_type"`
	Sequence  string `json:"sequence"`
	Octokit   bool   `json:"octokit"`
	Standard  bool   `json:"standard"`
	Detail    string `json:"detail"`
	AtMS      int64  `json:"at_ms"`
	// Body is the raw body it received.
	Body string `json:"body"`
}

// TestCLIEndToEnd is the developer CLI (docs/webhooks.md) against the real
// binaries: bin/gatehouse listen forwards the account's events, as they
// happen on either replica, to a receiver that verifies both signatures with
// the npm verifiers and the secret listen printed; bin/gatehouse trigger
// fires each event type (charge.requires_action leaves a charge waiting on
// the challenge page it prints); list and get read them; mistakes are
// clear errors. It reports the time from an event's commit to its forward.
func TestCLIEndToEnd(t *testing.T) {
	parallel(t)
	verify := verifierDir(t)
	st := newStack(t, stackOptions{env: webhooksStackEnv, workerEnv: append(slices.Clone(webhooksWorkerEnv), "SANDBOX_DISPUTE_DECISION_DELAY=2s")}, "developer CLI")
	cli := buildBinaries(t).cli
	bag := &secretBag{}
	m := newWebhookMerchant(t, st, bag, "127.0.0.43", "cli")
	env := append(os.Environ(), "GATEHOUSE_API="+st.replicas[1], "GATEHOUSE_SECRET_KEY="+m.key)
	gatehouse := func(args ...string) (string, string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, cli, args...)
		cmd.Env = env
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("gatehouse %v: %v", args, err)
		}
		return out.String(), errOut.String(), code
	}

	// listen, forwarding to a port where the verifier will listen: the
	// test binds it (port 0) and hands the socket to the verifier, which
	// can start only once listen has printed the secret.
	recvLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer recvLn.Close()
	recvSock, err := recvLn.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer recvSock.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	listen := exec.CommandContext(ctx, cli, "listen", "--forward-to", "http://"+recvLn.Addr().String()+"/webhooks")
	listen.Env = env
	listenOut, err := listen.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var listenErr strings.Builder
	listen.Stderr = &listenErr
	if err := listen.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = listen.Wait() })
	lines := bufio.NewScanner(listenOut)
	if !lines.Scan() {
		t.Fatalf("listen printed nothing: %s", listenErr.String())
	}
	first := lines.Text()
	i := strings.Index(first, "whsec_")
	if i < 0 {
		t.Fatalf("listen's first line names no secret: %q", strings.ReplaceAll(first, "whsec_", "whsec_<redacted>"))
	}
	secret := strings.Fields(first[i:])[0]
	bag.add(secret)
	var forwardLog strings.Builder
	var logMu sync.Mutex
	go func() {
		for lines.Scan() {
			logMu.Lock()
			forwardLog.WriteString(lines.Text() + "\n")
			logMu.Unlock()
		}
	}()

	// The receiver: verifies with @octokit/webhooks-methods and standardwebhooks.
	rctx, rcancel := context.WithCancel(context.Background())
	defer rcancel()
	recv := exec.CommandContext(rctx, "node", "receive.mjs", secret, "fd:3")
	recv.ExtraFiles = []*os.File{recvSock} // its fd 3
	recv.Dir = verify
	recvOut, err := recv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	recv.Stderr = io.Discard
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rcancel(); _ = recv.Wait() })
	got := make(chan received, 100)
	rlines := bufio.NewScanner(recvOut)
	if !rlines.Scan() || !strings.Contains(rlines.Text(), `"port"`) {
		t.Fatalf("receive.mjs did not start: %q", rlines.Text())
	}
	go func() {
		for rlines.Scan() {
			var r received
			if json.Unmarshal(rlines.Bytes(), &r) == nil {
				got <- r
			}
		}
	}()

	// Each event type, fired by trigger.
	started := time.Now()
	for _, ev := range events.Types {
		out, errOut, code := gatehouse("trigger", ev)
		if ev == events.ChargeCaptureFailed {
			// Only a provider that settles captures by notification fires
			// it: trigger says so and creates nothing.
			if code != 2 || !strings.Contains(errOut, "Adyen") {
				t.Errorf("gatehouse trigger %s: exit %d, want 2 saying only Adyen fires it\n%s%s", ev, code, out, errOut)
			}
			continue
		}
		if strings.HasPrefix(ev, "payout.") {
			// A payout pays out an available balance, which a capture
			// reaches only after the settlement delay: trigger says how
			// to make one and creates nothing (TestLedgerEndToEnd fires
			// them).
			if code != 2 || !strings.Contains(errOut, "POST /v1/payouts") {
				t.Errorf("gatehouse trigger %s: exit %d, want 2 naming POST /v1/payouts\n%s%s", ev, code, out, errOut)
			}
			continue
		}
		if strings.HasPrefix(ev, "webhook_endpoint.") {
			// Operational events tell of an endpoint's own deliveries
			// (TestWebhookFiltersAndOperationalEvents fires them).
			if code != 2 || !strings.Contains(errOut, "410 Gone") {
				t.Errorf("gatehouse trigger %s: exit %d, want 2 saying how endpoints fire it\n%s%s", ev, code, out, errOut)
			}
			continue
		}
		if code != 0 {
			t.Fatalf("gatehouse trigger %s: exit %d\n%s%s", ev, code, out, errOut)
		}
		if ev == events.ChargeRequiresAction {
			checkTriggeredChallenge(t, m, out)
		}
	}
	want := map[string]bool{}
	for _, e := range allEvents(t, m) {
		want[e.ID] = true
	}
	seen := map[string]received{}
	deadline := time.After(30 * time.Second)
	for len(seen) < len(want) {
		select {
		case r := <-got:
			if !r.Octokit || !r.Standard {
				t.Errorf("%s %s did not verify: %s", r.EventType, r.EventID, r.Detail)
			}
			checkEventBody(t, []byte(r.Body))
			seen[r.EventID] = r
		case <-deadline:
			logMu.Lock()
			t.Fatalf("forwarded %d of %d events within 30s\nlisten:\n%s%s", len(seen), len(want), forwardLog.String(), listenErr.String())
		}
	}
	types := map[string]bool{}
	var lags []time.Duration
	for _, e := range allEvents(t, m) {
		r, ok := seen[e.ID]
		if !ok {
			t.Errorf("event %s %s never forwarded", e.Type, e.ID)
			continue
		}
		types[r.EventType] = true
		if r.Sequence == "" {
			t.Errorf("%s forwarded without X-Service-Sequence", e.ID)
		}
		lags = append(lags, time.UnixMilli(r.AtMS).Sub(e.CreatedAt))
	}
	for _, ev := range events.Types {
		if !types[ev] && ev != events.ChargeCaptureFailed && !strings.HasPrefix(ev, "payout.") && !strings.HasPrefix(ev, "webhook_endpoint.") {
			t.Errorf("no %s forwarded", ev)
		}
	}
	slices.Sort(lags)
	t.Logf("listen forwarded %d events (the %d types, triggered in %s), both signatures verified by the npm libraries; event commit to forward p50 %s, p99 %s, max %s",
		len(seen), len(events.Types), time.Since(started).Round(time.Millisecond), lags[len(lags)/2].Round(time.Millisecond),
		lags[(len(lags)*99)/100].Round(time.Millisecond), lags[len(lags)-1].Round(time.Millisecond))

	// list and get, text and JSON.
	out, _, code := gatehouse("charges", "list", "--json", "--limit", "3")
	var list struct {
		Object string           `json:"object"`
		Data   []map[string]any `json:"data"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || list.Object != "list" || len(list.Data) != 3 {
		t.Errorf("charges list --json: exit %d: %.300s", code, out)
	}
	charge := list.Data[0]["id"].(string)
	if out, _, code := gatehouse("charges", "get", charge); code != 0 || !strings.Contains(out, charge) || !strings.Contains(out, "status") {
		t.Errorf("charges get: exit %d: %s", code, out)
	}
	for _, kind := range []string{"refunds", "events"} {
		if out, _, code := gatehouse(kind, "list"); code != 0 || strings.Count(out, "\n") < 2 {
			t.Errorf("%s list: exit %d: %s", kind, code, out)
		}
	}
	// Mistakes: clear errors, exit 1 (the API refused) or 2 (the command line).
	for _, tc := range []struct {
		args []string
		env  []string
		code int
		says string
	}{
		{[]string{"trigger", "charge.exploded"}, nil, 2, "not an event type"},
		{[]string{"charges", "get", "nope"}, nil, 1, "not_found"},
		{[]string{"charges", "list", "--limit", "500"}, nil, 2, "--limit"},
		{[]string{"listen"}, nil, 2, "--forward-to"},
		{[]string{"charges", "list"}, []string{"GATEHOUSE_SECRET_KEY="}, 2, "GATEHOUSE_SECRET_KEY"},
		{[]string{"charges", "list"}, []string{"GATEHOUSE_SECRET_KEY=sk_test_" + strings.Repeat("0", 32)}, 1, "invalid_token"},
	} {
		saved := env
		env = append(slices.Clone(env), tc.env...)
		_, errOut, code := gatehouse(tc.args...)
		env = saved
		if code != tc.code || !strings.Contains(errOut, tc.says) {
			t.Errorf("gatehouse %v: exit %d, %q; want exit %d saying %q", tc.args, code, errOut, tc.code, tc.says)
		}
	}
	checkNoWebhookSecrets(t, st, bag.all())
}

// triggerOut is what trigger charge.requires_action prints: the charge and
// its challenge page.
var triggerOut = regexp.MustCompile(`(?m)^charge ([0-9a-f-]{36}) is requires_action$(?s:.*)^challenge: (http\S+)$`)

// checkTriggeredChallenge: the charge trigger charge.requires_action made
// waits for the cardholder, and the challenge page it printed is that
// charge's, open to a browser.
func checkTriggeredChallenge(t *testing.T, m *whMerchant, out string) {
	t.Helper()
	got := triggerOut.FindStringSubmatch(out)
	if got == nil {
		t.Fatalf("trigger charge.requires_action printed no charge and challenge:\n%s", out)
	}
	r := m.do(t, "GET", "/v1/charges/"+got[1], "")
	mustExpect(t, r, 200, "")
	var ch struct {
		Status     string `json:"status"`
		NextAction struct {
			RedirectToURL struct {
				URL string `json:"url"`
			} `json:"redirect_to_url"`
		} `json:"next_action"`
	}
	decode(t, r, &ch)
	if ch.Status != "requires_action" || ch.NextAction.RedirectToURL.URL != got[2] {
		t.Errorf("the triggered charge is %s with challenge %q; trigger printed %q", ch.Status, ch.NextAction.RedirectToURL.URL, got[2])
	}
	page, err := http.Get(got[2])
	if err != nil {
		t.Fatalf("the challenge page: %v", err)
	}
	page.Body.Close()
	if page.StatusCode != 200 {
		t.Errorf("the challenge page answered %d", page.StatusCode)
	}
}

type eventRow struct {
	ID        string
	Type      string
	CreatedAt time.Time
}

// allEvents lists the merchant's events through the API.
func allEvents(t *testing.T, m *whMerchant) []eventRow {
	t.Helper()
	e := m.do(t, "GET", "/v1/events?limit=100", "")
	mustExpect(t, e, 200, "")
	var l struct {
		Data []struct {
			ID        string    `json:"id"`
			Type      string    `json:"event_type"`
			CreatedAt time.Time `json:"created_at"`
		} `json:"data"`
	}
	decode(t, e, &l)
	var out []eventRow
	for _, d := range l.Data {
		out = append(out, eventRow{d.ID, d.Type, d.CreatedAt})
	}
	return out
}
