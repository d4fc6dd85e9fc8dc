package e2e

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// recordedStripe answers the Stripe API with recorded PaymentIntents (the
// adapter's testdata): a confirmation that asks for 3-D Secure, then, on
// retrieval, whatever the test says the cardholder did on Stripe's page.
// stripe-mock keeps no state, so it cannot play this sequence.
type recordedStripe struct {
	t         *testing.T
	mu        sync.Mutex
	outcome   string            // fixture answered on retrieval
	returnURL map[string]string // return_url of each confirmation, by description
}

func (s *recordedStripe) fixture(name string) []byte {
	b, err := os.ReadFile(filepath.Join("..", "providers", "stripe", "testdata", name+".json"))
	if err != nil {
		s.t.Fatal(err)
	}
	return b
}

func (s *recordedStripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/payment_methods":
		w.Write([]byte(`{"id":"pm_1QxGh1LkdIwHu7ixkq9V3wLs","object":"payment_method","type":"card"}`))
	case r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents":
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.returnURL[r.PostForm.Get("description")] = r.PostForm.Get("return_url")
		w.Write(s.fixture("pi_requires_action"))
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/payment_intents/"):
		w.Write(s.fixture(s.outcome))
	default:
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":{"type":"invalid_request_error","message":"no such route"}}`))
	}
}

func (s *recordedStripe) set(outcome string) {
	s.mu.Lock()
	s.outcome = outcome
	s.mu.Unlock()
}

// TestStripeChallengeSettlesFromPaymentIntent: a Stripe PaymentIntent that
// asks for 3-D Secure makes the charge requires_action with Stripe's own
// challenge page as next_action; the gateway's return page, which Stripe
// sends the cardholder back to, has the worker read the PaymentIntent: still
// waiting leaves the charge waiting (the link works again), succeeded
// captures it, a failed authentication fails it authentication_failed.
func TestStripeChallengeSettlesFromPaymentIntent(t *testing.T) {
	parallel(t)
	fake := &recordedStripe{t: t, outcome: "pi_requires_action", returnURL: map[string]string{}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	st := newStack(t, stackOptions{env: []string{"STRIPE_SECRET_KEY=sk_test_recorded", "STRIPE_API_BASE=" + srv.URL}}, "Stripe 3-D Secure")
	setup := newClient(t, "127.0.0.79")
	_, token := st.signUp(t, setup, "stripe3ds", "Stripe 3DS Shop")
	key := st.newKey(t, setup, token, "stripe3ds").SecretKey
	f := &authFlow{payments: &payments{st: st, c: newClient(t, "127.0.0.80"), key: key}, browser: browserClient(t, "127.0.0.81")}

	start := func(order string) (authCharge, string) {
		t.Helper()
		c := f.charge(t, threeDSBody("4000002760003184", `,"provider":"stripe","description":"`+order+`","return_url":"https://shop.example/done"`))
		c, link := f.challenge(t, c.ID)
		if !strings.HasPrefix(link, "https://hooks.stripe.com/3d_secure_2/hosted") {
			t.Fatalf("next_action url %q, want Stripe's challenge page", link)
		}
		fake.mu.Lock()
		sent := fake.returnURL[order]
		fake.mu.Unlock()
		u, err := url.Parse(sent)
		if err != nil || !strings.HasPrefix(u.Path, "/authenticate/v1/"+c.ID+"/") || !strings.HasSuffix(u.Path, "/return") {
			t.Fatalf("return_url sent to Stripe %q, want the gateway's return page of %s", sent, c.ID)
		}
		return c, st.replicas[0] + u.Path
	}
	back := func(ret string) {
		t.Helper()
		e := f.page(t, ret)
		mustExpect(t, e, http.StatusSeeOther, "")
		if loc := e.header("Location"); !strings.HasPrefix(loc, "https://shop.example/done?charge=") {
			t.Fatalf("after Stripe's page the cardholder goes to %q", loc)
		}
	}

	c, ret := start("order-1")
	// Back without finishing: still waiting, and the return page works again.
	back(ret)
	time.Sleep(time.Second)
	if got := f.get(t, c.ID); got.Status != "requires_action" {
		t.Fatalf("after a return without authentication: %s", got.Status)
	}
	fake.set("pi_succeeded")
	deadline := time.Now().Add(waitFloor)
	for {
		e := f.page(t, ret)
		if e.status() == http.StatusSeeOther {
			break
		}
		// The worker may still be settling the first return.
		if !e.is(http.StatusConflict, "invalid_state") || time.Now().After(deadline) {
			t.Fatalf("second return: %s", e)
		}
		time.Sleep(100 * time.Millisecond)
	}
	got := f.wait(t, c.ID, 20*time.Second, "requires_action")
	if got.Status != "captured" || got.AmountCaptured != got.Amount || got.Authentication.Status != "succeeded" {
		t.Errorf("after Stripe's succeeded PaymentIntent: %s captured %d, authentication %s", got.Status, got.AmountCaptured, got.Authentication.Status)
	}

	fake.set("pi_requires_action")
	c2, ret2 := start("order-2")
	fake.set("pi_auth_failed")
	back(ret2)
	if got := f.wait(t, c2.ID, 20*time.Second, "requires_action"); got.Status != "failed" || deref(got.FailureCode) != "authentication_failed" {
		t.Errorf("after Stripe's failed authentication: %s %q", got.Status, deref(got.FailureCode))
	}
}
