package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestLowFindingsRefused: on the real binaries, with the server's own
// Stripe account configured,
//   - a return_url a header or policy could be built from is refused 400,
//     and the challenge page's Content-Security-Policy holds no text of the
//     charge's return_url;
//   - a connector with live-mode credentials is refused 403
//     live_mode_disabled;
//   - a provider token other than a documented test token is refused on the
//     server's Stripe account, before any call to Stripe;
//   - the audit log's month and heads are guarded by the database, and a
//     month dropped or a head moved back behind the guards' back (as a
//     superuser can) makes `api audit verify` fail naming them.
func TestLowFindingsRefused(t *testing.T) {
	parallel(t)
	var stripeCalls atomic.Int64
	stripe := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stripeCalls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"error":{"type":"api_error","message":"not in this test"}}`)
	}))
	t.Cleanup(stripe.Close)
	st := newStack(t, stackOptions{env: append([]string{"STRIPE_SECRET_KEY=sk_test_" + strings.Repeat("0", 24), "STRIPE_API_BASE=" + stripe.URL},
		chargesStackEnv...), workerEnv: chargesWorkerEnv}, "return_url, live connector credentials, server-account tokens, audit guards")
	setup := newClient(t, "127.0.0.230")
	merchantID, token := st.signUp(t, setup, "guards", "Guards Shop")
	key := st.newKey(t, setup, token, "guards").SecretKey
	f := &authFlow{payments: &payments{st: st, c: newClient(t, "127.0.0.231"), key: key}, browser: browserClient(t, "127.0.0.232")}
	charges := func() int64 {
		return queryInt(t, st.db, `SELECT count(*) FROM charges WHERE merchant_id = $1`, merchantID)
	}

	// return_url: refused when a header or a policy could be built from it.
	before := charges()
	for _, u := range []string{"https://*", "https://evil.example;sandbox/x", "javascript:alert(1)", "https://user:pw@x.example/", "//x.example/", "/done"} {
		e := f.do(t, http.MethodPost, "/v1/charges", threeDSBody("4000002760003184", `,"return_url":"`+u+`"`))
		if e.status() != http.StatusBadRequest || !strings.Contains(string(e.body), `"param":"return_url"`) {
			t.Errorf("return_url %q: %s, want 400 naming return_url", u, e)
		}
	}
	if n := charges(); n != before {
		t.Errorf("refused return_urls created %d charges", n-before)
	}
	// A real challenge page: its policy is the constant one, with no text
	// of the return_url; the answer redirects to the return_url.
	c, link := f.challenge(t, f.charge(t, threeDSBody("4000002760003184", `,"return_url":"https://shop.example/done?order=9"`)).ID)
	page := f.page(t, link)
	mustExpect(t, page, http.StatusOK, "")
	const policy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; base-uri 'none'; frame-ancestors *; form-action 'self' http: https:"
	if got := page.header("Content-Security-Policy"); got != policy {
		t.Errorf("the challenge page's policy is %q, want %q", got, policy)
	}
	done := f.answer(t, link, "succeeded")
	mustExpect(t, done, http.StatusSeeOther, "")
	if got := done.header("Content-Security-Policy"); got != "" && got != policy {
		t.Errorf("after the answer the policy is %q, want %q", got, policy)
	}
	if loc, err := url.Parse(done.header("Location")); err != nil || loc.Host != "shop.example" || loc.Query().Get("charge") != c.ID {
		t.Errorf("the answer sends the cardholder to %q, want the return_url with charge=%s", done.header("Location"), c.ID)
	}

	// Live-mode connector credentials: 403, nothing stored.
	connectorsBefore := queryInt(t, st.db, `SELECT count(*) FROM connectors WHERE merchant_id = $1`, merchantID)
	for _, k := range []string{"sk_live_" + strings.Repeat("a", 24), "rk_live_" + strings.Repeat("b", 24)} {
		e := f.do(t, http.MethodPost, "/v1/connectors", `{"provider":"stripe","name":"Live","credentials":{"secret_key":"`+k+`"}}`)
		if e.status() != http.StatusForbidden || !strings.Contains(string(e.body), `"code":"live_mode_disabled"`) ||
			!strings.Contains(string(e.body), `"message":"Live mode is not activated"`) {
			t.Errorf("a connector with %s...: %s, want 403 live_mode_disabled", k[:8], e)
		}
	}
	if n := queryInt(t, st.db, `SELECT count(*) FROM connectors WHERE merchant_id = $1`, merchantID); n != connectorsBefore {
		t.Errorf("live credentials stored %d connectors", n-connectorsBefore)
	}

	// The server's Stripe account takes no token but the documented test
	// tokens: an arbitrary pm_ is refused before any call to Stripe.
	before, calls := charges(), stripeCalls.Load()
	for _, tok := range []string{"pm_1QxGh1LkdIwHu7ixkq9V3wLs", "tok_1QxGh1LkdIwHu7ix"} {
		e := f.do(t, http.MethodPost, "/v1/charges", `{"amount":1500,"currency":"usd","payment_method":"card","provider":"stripe","card":{"token":"`+tok+`"}}`)
		if e.status() != http.StatusBadRequest || !strings.Contains(string(e.body), `"param":"card.token"`) {
			t.Errorf("card.token %s on the server's Stripe account: %s, want 400 naming card.token", tok, e)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if n, got := charges(), stripeCalls.Load(); n != before || got != calls {
		t.Errorf("refused tokens: %d charges created, %d calls to Stripe", n-before, got-calls)
	}
	mustExpect(t, f.do(t, http.MethodPost, "/v1/charges", `{"amount":1500,"currency":"usd","payment_method":"card","provider":"stripe","card":{"token":"pm_card_visa"}}`),
		http.StatusCreated, "")

	// The audit log: the database refuses what would hide a month or move a
	// head back, whatever role asks.
	verify := func() (string, int) {
		t.Helper()
		cmd := exec.Command(st.bins.api, "audit", "verify")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + st.db.URL}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return out.String(), cmd.ProcessState.ExitCode()
	}
	if out, code := verify(); code != 0 || !strings.Contains(out, "intact") {
		t.Fatalf("verify before any tampering: exit %d\n%s", code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var chain int
	if err := st.db.Pool.QueryRow(ctx, `SELECT chain FROM audit_heads WHERE merchant_id = $1 AND seq >= 1 ORDER BY chain LIMIT 1`,
		merchantID).Scan(&chain); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	ahead := "audit_log_" + time.Date(now.Year(), now.Month()+2, 1, 0, 0, 0, 0, time.UTC).Format("2006_01")
	steps := []string{
		`ALTER TABLE audit_log DETACH PARTITION ` + ahead,
		`DROP TABLE ` + ahead,
		fmt.Sprintf(`UPDATE audit_heads SET seq = 0, hash = decode(repeat('00', 32), 'hex'), at = '-infinity' WHERE merchant_id = '%s' AND chain = %d`, merchantID, chain),
	}
	conn, err := st.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, q := range append([]string{`ALTER TABLE audit_heads DISABLE TRIGGER ALL`}, steps...) {
		if _, err := conn.Exec(ctx, q); err == nil {
			t.Fatalf("%s: accepted by the database", q)
		}
	}
	// With every trigger off, as a superuser can: verify names the month
	// and the chain.
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	for _, q := range steps {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := conn.Exec(ctx, `SET session_replication_role = DEFAULT`); err != nil {
		t.Fatal(err)
	}
	out, code := verify()
	head := fmt.Sprintf("merchant %s chain %d seq 1: entry after the chain's head (seq 0): the head was moved back", merchantID, chain)
	if code != 1 || !strings.Contains(out, "BROKEN: month ") || !strings.Contains(out, "(partition "+ahead+")") ||
		!strings.Contains(out, "drop was not recorded") || !strings.Contains(out, head) {
		t.Fatalf("verify after an unrecorded drop of %s and a head moved back: exit %d, want 1 naming both\n%s", ahead, code, out)
	}
}
