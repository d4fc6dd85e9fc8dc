package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
)

// TestLookupsAfterTheIdempotencyWindow: a capture and a refund whose first
// answer is lost after the provider booked them (the sandbox's lost-answer
// amount) are, once PROVIDER_IDEMPOTENCY_WINDOW has passed, never sent
// again: the worker only looks them up, and they end with the provider's
// outcome. The window is 3 s and the retry backoff 6 s (asynq keeps whole seconds: 5 to 6 s), so the first attempt
// is sent within the window and every later one comes after it. The
// sandbox's books count every call under a key; lookups read them without
// calling.
func TestLookupsAfterTheIdempotencyWindow(t *testing.T) {
	chaosParallel(t)
	st, m := chaosStack(t, "127.0.0.71", stackOptions{workerEnv: []string{
		"PROVIDER_IDEMPOTENCY_WINDOW=3s", "PROVIDER_RETRY_BASE=6s", "PROVIDER_RETRY_MAX=6s",
	}})
	create := func(capture bool, amount int64, tag string) string {
		e := m.do(t, http.MethodPost, "/v1/charges", cardBody("4242424242424242", capture, amount, tag))
		mustExpect(t, e, http.StatusCreated, "")
		return chargeFrom(t, e)
	}
	toRefund, toCapture := create(true, 3000, "window-refund"), create(false, 3000, "window-capture")
	before, _ := m.waitCharges(t, []string{toRefund, toCapture}, func(_, s string) bool { return s != "created" }, 30*time.Second)
	if before[toRefund].Status != "captured" || before[toCapture].Status != "authorized" {
		t.Fatalf("charges %s and %s, want captured and authorized", before[toRefund].Status, before[toCapture].Status)
	}

	e := m.do(t, http.MethodPost, "/v1/refunds", fmt.Sprintf(`{"charge":%q,"amount":%d}`, toRefund, sandbox.LostAnswerAmount))
	mustExpect(t, e, http.StatusCreated, "")
	var r refundJSON
	decode(t, e, &r)
	e = m.do(t, http.MethodPost, "/v1/charges/"+toCapture+"/capture", fmt.Sprintf(`{"amount":%d}`, sandbox.LostAnswerAmount))
	mustExpect(t, e, http.StatusOK, "")
	start := time.Now()

	refund := m.waitRefund(t, r.ID, 60*time.Second)
	// A capture the lookup found not booked would clear the request and
	// leave the charge authorized: wait for the request itself to clear.
	for deadline := time.Now().Add(60 * time.Second); queryInt(t, st.db, `SELECT count(*) FROM charges WHERE id = $1 AND pending_action IS NOT NULL`, toCapture) > 0; {
		if time.Now().After(deadline) {
			t.Fatal("the capture is still pending after 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	captured, _ := m.waitCharges(t, []string{toCapture}, func(string, string) bool { return true }, time.Second)
	t.Logf("settled %s after the requests", time.Since(start).Round(time.Millisecond))

	for _, c := range []struct {
		what, key   string
		status      string
		wantStatus  string
		gateway     int64
		wantAmount  int64
		failureCode *string
	}{
		{"refund", "gh_" + r.ID + "_refund", refund.Status, "succeeded", refund.Amount, sandbox.LostAnswerAmount, refund.FailureCode},
		{"capture", "gh_" + toCapture + "_capture", captured[toCapture].Status, "captured", captured[toCapture].AmountCaptured, sandbox.LostAnswerAmount, nil},
	} {
		calls := queryInt(t, st.db, `SELECT coalesce(sum(calls), 0) FROM sandbox_ledger WHERE idempotency_key = $1 AND reference IS NOT NULL`, c.key)
		booked := queryInt(t, st.db, `SELECT coalesce(sum(amount), 0) FROM sandbox_ledger WHERE idempotency_key = $1 AND reference IS NOT NULL`, c.key)
		t.Logf("%s: %s, gateway amount %d, provider booked %d under %s in %d call(s)", c.what, c.status, c.gateway, booked, c.key, calls)
		if c.status != c.wantStatus {
			t.Errorf("%s: %s (%s), want %s: the provider booked it", c.what, c.status, chaosDeref(c.failureCode), c.wantStatus)
		}
		if calls != 1 {
			t.Errorf("%s: %d calls under %s, want 1: sent once within the window, then only looked up", c.what, calls, c.key)
		}
		if booked != c.wantAmount || c.gateway != booked {
			t.Errorf("%s: provider booked %d, gateway recorded %d, want both %d", c.what, booked, c.gateway, c.wantAmount)
		}
	}
	// Nothing else was booked: one refund and one capture beside the two authorizations.
	if n := queryInt(t, st.db, `SELECT count(*) FROM sandbox_ledger WHERE operation IN ('capture', 'refund')`); n != 2 {
		t.Errorf("%d captures and refunds in the provider's books, want 2", n)
	}
}
