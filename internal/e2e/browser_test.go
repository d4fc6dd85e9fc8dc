package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// browserTools returns the folder of the browser journeys with playwright-core
// installed (deploy/local/tools.sh does it) and the chromium to drive. Without
// them the test is skipped, or fails under GATEHOUSE_REQUIRE_SERVICES=1.
func browserTools(t *testing.T) (dir, chromium string) {
	t.Helper()
	chromium = os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		testenv.Missing(t, "no chromium at %s: %v (deploy/local/tools.sh installs it)", chromium, err)
	}
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(root, "internal", "e2e", "browser")
	needNodeModule(t, dir, "playwright-core")
	return dir, chromium
}

// screenshotDir is where the browser journeys leave their screenshots:
// $GATEHOUSE_SCREENSHOTS, or bin/screenshots of the checkout.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GATEHOUSE_SCREENSHOTS")
	if dir == "" {
		root, err := harness.ModuleRoot()
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

// attacker serves the pages of another site on loopback: one that posts a
// form to the dashboard as soon as it loads (CSRF), and one that frames the
// dashboard and the card field (clickjacking). Reached as 127.0.0.1 it is
// the same site as the API (another port: a cross-origin, same-site page,
// which gets the SameSite=Strict cookie); reached as localhost, another site.
func attacker(t *testing.T) (sameSite, crossSite string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/csrf", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>You won a prize</title><form method="post" action="%s">
<input name="name" value="csrf attack"><input name="csrf_token" value="guessed"></form>
<script>document.forms[0].submit()</script>`, html.EscapeString(r.URL.Query().Get("target")))
	})
	mux.HandleFunc("/frame", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>Click here</title><h1>Framing test</h1>
<iframe name="dashboard" src="%s" width="560" height="420"></iframe>
<iframe name="card" src="%s" width="420" height="200"></iframe>`,
			html.EscapeString(r.URL.Query().Get("dashboard")), html.EscapeString(r.URL.Query().Get("card")))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	return srv.URL, fmt.Sprintf("http://localhost:%d", port)
}

// journeys is what journeys.mjs saw.
type journeys struct {
	journeyRun
	SessionCookie struct {
		HTTPOnly bool   `json:"httpOnly"`
		SameSite string `json:"sameSite"`
		Secure   bool   `json:"secure"`
		Path     string `json:"path"`
	} `json:"sessionCookie"`
	KeyShown          bool   `json:"keyShown"`
	SecretAfterReload bool   `json:"secretAfterReload"`
	KeyListed         bool   `json:"keyListed"`
	CheckoutResult    string `json:"checkoutResult"`
	Charge            string `json:"charge"`
	PageReadsField    bool   `json:"pageReadsField"`
	CardSentBy        []struct {
		Frame, URL string
	} `json:"cardSentBy"`
	ListedAsCaptured      bool           `json:"listedAsCaptured"`
	RefundNotice          string         `json:"refundNotice"`
	Refunded              string         `json:"refunded"`
	RefundSucceededEvents int            `json:"refundSucceededEvents"`
	EventNamesCharge      bool           `json:"eventNamesCharge"`
	EndpointSecretShown   bool           `json:"endpointSecretShown"`
	Endpoint              string         `json:"endpoint"`
	EndpointListed        bool           `json:"endpointListed"`
	RecoverPreview        string         `json:"recoverPreview"`
	CSRF                  map[string]int `json:"csrf"`
	DashboardFramed       bool           `json:"dashboardFramed"`
	CardFramed            bool           `json:"cardFramed"`
	AttackKeyListed       bool           `json:"attackKeyListed"`
	SignedOutNotice       string         `json:"signedOutNotice"`
	OldCookieLandsOn      string         `json:"oldCookieLandsOn"`
	OldCookieDirect       struct {
		Status   int    `json:"status"`
		Location string `json:"location"`
	} `json:"oldCookieDirect"`
	OldCookieOtherReplica struct {
		Status   int    `json:"status"`
		Location string `json:"location"`
	} `json:"oldCookieOtherReplica"`
	OtherReplicaBeforeSignOut int `json:"otherReplicaBeforeSignOut"`
	OldCookiePost             int `json:"oldCookiePost"`
	authJourneys
	Customers  customersJourney  `json:"customers"`
	Connectors connectorsJourney `json:"connectors"`

	Console []string `json:"console"`
}

// TestBrowserJourneys runs the journeys of client-side card collection
// and the dashboard (api/openapi.yaml) in Debian's chromium (journeys.mjs): sign in to
// the dashboard, create a key (its secret shown once), pay on the example
// checkout (examples/checkout, another origin) through the card field, see
// the charge captured in the dashboard, refund half, see refund.succeeded,
// create an endpoint and see a test delivery's attempt, have a cross-site
// form and framing refused, and sign out, after which the old cookie is
// refused; then pay with cards whose issuer asks the cardholder to
// authenticate: the challenge in the card field, completed and failed, and on
// the issuer's page with a return_url, and saved cards charged again off
// session by the merchant's server; then, signed in again, see a customer
// whose saved cards were charged (a challenge completed on the issuer's page,
// an off-session renewal, a charge voided while it required action) on the
// dashboard's customer page, and delete a saved card there; then make
// connectors, set the routing and see charges move on from a connector
// rehearsing a soft decline, with each connector's last 24 hours on its
// page. Each page leaves
// a screenshot in bin/screenshots. The stack's secret scan (B5) covers these processes' logs
// and database; the browser's console, the example checkout's log and the
// script's output are scanned here too.
func TestBrowserJourneys(t *testing.T) {
	parallel(t)
	dir, chromium := browserTools(t)
	shots := screenshotDir(t)
	// Receivers listen on loopback, which the API refuses by default.
	st := newStack(t, stackOptions{env: []string{"WEBHOOK_ALLOW_PRIVATE_NETWORKS=true"}}, "browser")
	setup := newClient(t, "127.0.0.40")
	email, password := "browser-"+harness.RandomHex(4)+"@example.com", "correct horse "+harness.RandomHex(8)
	merchantID := st.createMerchant(t, email, password, "Browser Shop")
	token := st.sessionToken(t, setup, email, password)
	key := st.newKey(t, setup, token, "checkout")
	if !strings.HasPrefix(key.PublicKey, "pk_test_") {
		t.Fatalf("no public key in the key's creation answer")
	}
	checkoutAddr, checkoutLog := startCheckout(t, st, key)
	recv := newReceiver(t, "browser", func(hit, int) (int, time.Duration, http.Header) { return 200, 0, nil })
	sameSite, crossSite := attacker(t)

	cfg, err := json.Marshal(map[string]string{
		"api": st.replicas[0], "api2": st.replicas[1], "email": email, "password": password, "checkout": "http://" + checkoutAddr + "/",
		"receiver": recv.url(), "attackerSameSite": sameSite, "attackerCrossSite": crossSite, "shots": shots,
	})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	out, stderr, err := runJourney(dir, chromium, "journeys.mjs", cfg, 4*time.Minute)
	took := time.Since(started)
	// The browser's side of B5: what the script printed (the browser's
	// console included), its errors and the checkout's log hold no secret,
	// and no card number or secret key (the shown-once secret is read from
	// the page but never printed).
	for _, h := range append(append(scanSecrets("journeys.mjs output", out), scanSecrets("journeys.mjs stderr", []byte(stderr))...),
		scanSecrets("example checkout log", []byte(checkoutLog.Tail(1<<20)))...) {
		t.Errorf("secret scan: %s", h)
	}
	if err != nil {
		t.Fatalf("node journeys.mjs: %v\n%s\ncheckout log:\n%s", err, stderr, checkoutLog.Tail(1<<20))
	}
	var got journeys
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("journeys.mjs printed %q: %v", out, err)
	}
	t.Logf("browser journeys in chromium: %d ms in the browser (%s with node's start); steps (ms): %v; screenshots in %s",
		got.TookMS, took.Round(time.Millisecond), got.Steps, shots)
	if got.Error != "" {
		t.Fatalf("journeys.mjs: %s\nat %s, showing %q (screenshot failure.png)\nconsole: %q\ncheckout log:\n%s",
			got.Error, got.FailedAt, got.FailedAlert, got.Console, checkoutLog.Tail(1<<20))
	}
	if len(got.PageErrors) > 0 || len(got.ConsoleErrors) > 0 {
		t.Errorf("page errors %q, console errors %q", got.PageErrors, got.ConsoleErrors)
	}

	// 1. The session cookie.
	if c := got.SessionCookie; !c.HTTPOnly || c.SameSite != "Strict" || c.Path != "/dashboard" || c.Secure {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, path /dashboard, not Secure over plain HTTP", c)
	}
	// 2. The key's secret, once.
	if !got.KeyShown || got.SecretAfterReload || !got.KeyListed {
		t.Errorf("key: shown %v, still shown after a reload %v, listed %v", got.KeyShown, got.SecretAfterReload, got.KeyListed)
	}
	// 3. The checkout: only the card field sends the card, only to the gateway.
	if got.PageReadsField {
		t.Error("the checkout page could read the card field's document")
	}
	if len(got.CardSentBy) != 1 || got.CardSentBy[0].Frame != "card field" || got.CardSentBy[0].URL != st.replicas[0]+"/v1/tokens" {
		t.Errorf("the card number was sent by %+v; want only the card field, to %s/v1/tokens", got.CardSentBy, st.replicas[0])
	}
	// 4-6. Captured, half refunded, refund.succeeded.
	if !got.ListedAsCaptured || got.Refunded != "10.00 USD" || got.RefundSucceededEvents != 1 || !got.EventNamesCharge {
		t.Errorf("dashboard: listed as captured %v, refunded %q, refund.succeeded events %d (names the charge %v)",
			got.ListedAsCaptured, got.Refunded, got.RefundSucceededEvents, got.EventNamesCharge)
	}
	p := &payments{st: st, c: setup, key: key.SecretKey}
	final, _ := p.waitCharges(t, []string{got.Charge}, func(_, status string) bool { return status != "created" }, 20*time.Second)
	if c := final[got.Charge]; c.Status != "captured" || c.AmountRefunded != 1000 || c.Card.Last4 == nil || *c.Card.Last4 != "4242" {
		t.Errorf("the checkout's charge through the API: %+v; want captured, 1000 refunded, card 4242", c)
	}
	// 7. The endpoint and its test delivery, received.
	if !got.EndpointSecretShown || got.Endpoint == "" || !got.EndpointListed || !strings.Contains(got.RecoverPreview, "would be sent again") {
		t.Errorf("endpoint %q: secret shown %v, listed %v, recover preview %q", got.Endpoint, got.EndpointSecretShown, got.EndpointListed, got.RecoverPreview)
	}
	tests := 0
	for _, h := range recv.all() {
		if h.header.Get("X-Service-Test") != "" {
			tests++
		}
	}
	if tests != 1 {
		t.Errorf("the receiver got %d test deliveries, want 1", tests)
	}
	// 8. CSRF and framing.
	if got.CSRF["same_site"] != http.StatusForbidden || got.CSRF["cross_site"] == http.StatusOK || got.CSRF["cross_site"] == 0 || got.AttackKeyListed {
		t.Errorf("cross-site forms answered %v (want 403 from a same-site page, a refusal from another site); the attack's key listed: %v", got.CSRF, got.AttackKeyListed)
	}
	if n := queryInt(t, st.db, `SELECT count(*) FROM api_keys WHERE merchant_id = $1 AND name IN ('csrf attack', 'after sign out')`, merchantID); n != 0 {
		t.Errorf("%d keys were created by forged or signed-out requests", n)
	}
	if got.DashboardFramed || !got.CardFramed {
		t.Errorf("framed by another origin: the dashboard rendered %v (want refused), the card field %v (want allowed)", got.DashboardFramed, got.CardFramed)
	}
	// 9. Signed out: the old cookie is refused.
	if got.SignedOutNotice == "" || got.OldCookieLandsOn != "/dashboard/login" || got.OldCookieDirect.Status != http.StatusSeeOther ||
		got.OldCookieDirect.Location != "/dashboard/login" || got.OldCookiePost != http.StatusUnauthorized ||
		got.OtherReplicaBeforeSignOut != http.StatusOK || got.OldCookieOtherReplica.Status != http.StatusSeeOther {
		t.Errorf("after sign out: notice %q, the old cookie lands on %s, answered %+v, a form with it %d; the other replica answered %d before, %+v after",
			got.SignedOutNotice, got.OldCookieLandsOn, got.OldCookieDirect, got.OldCookiePost, got.OtherReplicaBeforeSignOut, got.OldCookieOtherReplica)
	}
	for _, name := range []string{"dashboard-login", "dashboard-key-created", "dashboard-keys", "checkout-filled", "checkout-paid",
		"dashboard-charges", "dashboard-charge", "dashboard-events", "dashboard-event", "dashboard-webhook", "dashboard-webhooks",
		"dashboard-csrf-refused", "dashboard-framing-refused", "dashboard-signed-out",
		"checkout-challenge", "checkout-challenge-paid", "checkout-challenge-failed", "redirect-challenge", "redirect-returned",
		"saved-card-again", "saved-card-again-refused", "dashboard-customers", "dashboard-customer",
		"dashboard-connectors", "dashboard-connector", "dashboard-routing", "dashboard-routing-refused"} {
		if fi, err := os.Stat(filepath.Join(shots, name+".png")); err != nil || fi.Size() < 1000 {
			t.Errorf("screenshot %s: %v", name, err)
		}
	}
	// 10-13. Cardholder authentication and saved cards.
	checkAuthJourneys(t, p, got, "http://"+checkoutAddr+"/")
	// 14. The dashboard's customers.
	checkCustomersJourney(t, got.Customers)
	// 15. The dashboard's connectors and routing.
	checkConnectorsJourney(t, got.Connectors)
	checkNoCardData(t, st)
}

// startCheckout builds examples/checkout and starts it on its own port (another
// origin) with the key; it returns its address and its log.
func startCheckout(t *testing.T, st *stack, key apiKey) (string, *harness.Output) {
	t.Helper()
	bin := testenv.Build(t, nil, "./examples/checkout").Path("checkout")
	addr := testenv.FreeAddr(t)
	env := append(os.Environ(), "GATEHOUSE_API="+st.replicas[0], "GATEHOUSE_PUBLIC_KEY="+key.PublicKey,
		"GATEHOUSE_SECRET_KEY="+key.SecretKey, "CHECKOUT_ADDR="+addr)
	p := testenv.StartProcess(t, "the example checkout", nil, env, bin)
	t.Cleanup(func() { testenv.Kill(t, p) })
	testenv.WaitReady(t, "the example checkout on "+addr, p, waitFloor, 50*time.Millisecond, harness.Listening(addr))
	return addr, p.Out
}

// journeyRun is what every journey script prints beside its findings: how
// it went, and the errors of the pages it opened.
type journeyRun struct {
	Error         string           `json:"error"`
	FailedAt      string           `json:"failedAt"`
	FailedAlert   []string         `json:"failedAlert"`
	Steps         map[string]int64 `json:"steps"`
	TookMS        int64            `json:"took_ms"`
	PageErrors    []string         `json:"pageErrors"`
	ConsoleErrors []string         `json:"consoleErrors"`
}

func (r journeyRun) run() journeyRun { return r }

// journey runs a journey script (runJourney) with cfg as JSON and returns
// what it found, decoded into T. A secret in what it printed and a page or
// console error are test errors; a script that did not finish stops t,
// naming the step and its screenshot (<script>-failure.png).
func journey[T interface{ run() journeyRun }](t *testing.T, dir, chromium, script string, cfg any, timeout time.Duration) T {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runJourney(dir, chromium, script, b, timeout)
	for _, h := range append(scanSecrets(script+" output", out), scanSecrets(script+" stderr", []byte(stderr))...) {
		t.Errorf("secret scan: %s", h)
	}
	if err != nil {
		t.Fatalf("node %s: %v\n%s", script, err, stderr)
	}
	var got T
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%s printed %q: %v", script, out, err)
	}
	if r := got.run(); r.Error != "" {
		t.Fatalf("%s: %s\nat %s, showing %q (screenshot %s-failure.png); %d ms, steps (ms) %v",
			script, r.Error, r.FailedAt, r.FailedAlert, strings.TrimSuffix(script, ".mjs"), r.TookMS, r.Steps)
	} else if len(r.PageErrors) > 0 || len(r.ConsoleErrors) > 0 {
		t.Errorf("page errors %q, console errors %q", r.PageErrors, r.ConsoleErrors)
	}
	return got
}

// runJourney runs a journey script of internal/e2e/browser in dir with cfg
// as its argument and Debian's chromium at the given path, for at most
// timeout, and returns what it printed on stdout and stderr.
func runJourney(dir, chromium, script string, cfg []byte, timeout time.Duration) (out []byte, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	run := exec.CommandContext(ctx, "node", script, string(cfg))
	run.Dir = dir
	run.Env = append(os.Environ(), "CHROMIUM="+chromium)
	var errOut strings.Builder
	run.Stderr = &errOut
	out, err = run.Output()
	return out, errOut.String(), err
}
