package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Cardholder authentication (3-D Secure) against the real binaries: the
// sandbox's test cards ask for it, the charge waits in requires_action with
// its next_action, the emulated issuer page records one answer, and the
// worker settles the charge with it, with a void, or at the timeout.

// authCharge is what these tests read of a charge beyond chargeJSON.
type authCharge struct {
	chargeJSON
	Customer       *string `json:"customer"`
	PaymentMethod  string  `json:"payment_method"`
	OffSession     bool    `json:"off_session"`
	Authentication struct {
		Status      string  `json:"status"`
		CompletedAt *string `json:"completed_at"`
	} `json:"authentication"`
	NextAction *struct {
		Type          string `json:"type"`
		RedirectToURL *struct {
			URL       string `json:"url"`
			ReturnURL string `json:"return_url"`
		} `json:"redirect_to_url"`
	} `json:"next_action"`
}

// browserClient is a client that does not follow redirects, so a test reads
// where the challenge sends the cardholder.
func browserClient(t *testing.T, ip string) *http.Client {
	c := newClient(t, ip)
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c
}

// authFlow is one merchant's secret key and a cardholder's browser.
type authFlow struct {
	*payments
	browser *http.Client
}

func (f *authFlow) charge(t *testing.T, body string) authCharge {
	t.Helper()
	e := f.do(t, http.MethodPost, "/v1/charges", body)
	mustExpect(t, e, http.StatusCreated, "")
	var c authCharge
	decode(t, e, &c)
	return c
}

// get reads the charge id.
func (f *authFlow) get(t *testing.T, id string) authCharge {
	t.Helper()
	e := f.do(t, http.MethodGet, "/v1/charges/"+id, "")
	mustExpect(t, e, http.StatusOK, "")
	var c authCharge
	decode(t, e, &c)
	return c
}

// wait polls the charge until it leaves the statuses in from.
func (f *authFlow) wait(t *testing.T, id string, within time.Duration, from ...string) authCharge {
	t.Helper()
	within = patience(within)
	deadline := time.Now().Add(within)
	for {
		c := f.get(t, id)
		if !strings.Contains(" "+strings.Join(from, " ")+" ", " "+c.Status+" ") {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("charge %s still %s after %s", id, c.Status, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// challenge returns the charge once it requires action, with its link.
func (f *authFlow) challenge(t *testing.T, id string) (authCharge, string) {
	t.Helper()
	c := f.wait(t, id, 20*time.Second, "created")
	if c.Status != "requires_action" || c.NextAction == nil || c.Authentication.Status != "pending" {
		t.Fatalf("charge %s: %s, next_action %+v, authentication %q; want requires_action, pending", id, c.Status, c.NextAction, c.Authentication.Status)
	}
	if c.NextAction.Type != "redirect_to_url" {
		return c, ""
	}
	return c, c.NextAction.RedirectToURL.URL
}

// answer posts the cardholder's answer to link as the page's form does.
func (f *authFlow) answer(t *testing.T, link, answer string) exchange {
	t.Helper()
	e, err := sendWith(f.browser, http.MethodPost, link, "", "answer="+answer, "Content-Type", "application/x-www-form-urlencoded")
	if err != nil {
		t.Fatal(err)
	}
	f.st.check(t, e)
	return e
}

func (f *authFlow) page(t *testing.T, link string) exchange {
	t.Helper()
	e, err := send(f.browser, http.MethodGet, link, "", "")
	if err != nil {
		t.Fatal(err)
	}
	f.st.check(t, e)
	return e
}

func threeDSBody(number string, extra string) string {
	return fmt.Sprintf(`{"amount":2500,"currency":"eur","payment_method":"card",`+
		`"card":{"number":%q,"exp_month":12,"exp_year":%d,"cvc":"123"}%s}`, number, time.Now().Year()+2, extra)
}

func TestThreeDSecure(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{env: chargesStackEnv, workerEnv: chargesWorkerEnv}, "3-D Secure")
	setup := newClient(t, "127.0.0.70")
	_, token := st.signUp(t, setup, "threeds", "3DS Shop")
	key := st.newKey(t, setup, token, "threeds").SecretKey
	f := &authFlow{payments: &payments{st: st, c: newClient(t, "127.0.0.71"), key: key}, browser: browserClient(t, "127.0.0.72")}
	const ret = `,"return_url":"https://shop.example/checkout/done?order=7"`

	t.Run("every_test_card_on_session", func(t *testing.T) {
		cases := []struct {
			number, answer, status, code, auth string
		}{
			{"4000002500003155", "succeeded", "captured", "", "succeeded"},
			{"4000002500003155", "failed", "failed", "authentication_failed", "failed"},
			{"4000002760003184", "succeeded", "captured", "", "succeeded"},
			{"4000002760003184", "failed", "failed", "authentication_failed", "failed"},
			{"4000008260003178", "succeeded", "failed", "insufficient_funds", "succeeded"},
		}
		for _, tc := range cases {
			c := f.charge(t, threeDSBody(tc.number, ret))
			c, link := f.challenge(t, c.ID)
			if c.NextAction.RedirectToURL.ReturnURL != "https://shop.example/checkout/done?order=7" {
				t.Errorf("%s: return_url %q", tc.number, c.NextAction.RedirectToURL.ReturnURL)
			}
			page := f.page(t, link)
			mustExpect(t, page, http.StatusOK, "")
			if !strings.Contains(string(page.body), `value="succeeded"`) || !strings.Contains(page.header("Content-Security-Policy"), "script-src 'self'") {
				t.Fatalf("%s: the challenge page has no Complete form or no strict policy: %s", tc.number, page.body)
			}
			e := f.answer(t, link, tc.answer)
			mustExpect(t, e, http.StatusSeeOther, "")
			loc, err := url.Parse(e.header("Location"))
			if err != nil || loc.Host != "shop.example" || loc.Query().Get("charge") != c.ID || loc.Query().Get("order") != "7" {
				t.Fatalf("%s: sent to %q, want the return_url with charge=%s", tc.number, e.header("Location"), c.ID)
			}
			// The link is single-use.
			mustExpect(t, f.answer(t, link, "succeeded"), http.StatusConflict, "invalid_state")
			mustExpect(t, f.page(t, link), http.StatusConflict, "invalid_state")
			got := f.wait(t, c.ID, 20*time.Second, "requires_action")
			if got.Status != tc.status || deref(got.FailureCode) != tc.code || got.Authentication.Status != tc.auth || got.NextAction != nil {
				t.Errorf("%s answered %s: %s %q, authentication %s; want %s %q, %s", tc.number, tc.answer, got.Status,
					deref(got.FailureCode), got.Authentication.Status, tc.status, tc.code, tc.auth)
			}
			if got.Authentication.CompletedAt == nil {
				t.Errorf("%s answered %s: no authentication.completed_at", tc.number, tc.answer)
			}
		}
		frictionless := f.wait(t, f.charge(t, threeDSBody("4000000000003055", ret)).ID, 20*time.Second, "created")
		if frictionless.Status != "captured" || frictionless.NextAction != nil || frictionless.Authentication.Status != "not_required" {
			t.Errorf("frictionless card: %s, next_action %+v, authentication %s", frictionless.Status, frictionless.NextAction, frictionless.Authentication.Status)
		}
	})

	t.Run("links_are_bound_and_nothing_else_moves_the_charge", func(t *testing.T) {
		a, linkA := f.challenge(t, f.charge(t, threeDSBody("4000002760003184", ret)).ID)
		b, linkB := f.challenge(t, f.charge(t, threeDSBody("4000002760003184", ret)).ID)
		tokenA := linkA[strings.LastIndex(linkA, "/")+1:]
		swapped := strings.Replace(linkB, "/"+linkB[strings.LastIndex(linkB, "/")+1:], "/"+tokenA, 1)
		for _, bad := range []string{swapped, linkA[:len(linkA)-2] + "xx", strings.Replace(linkA, a.ID, b.ID, 1)} {
			mustExpect(t, f.page(t, bad), http.StatusNotFound, "not_found")
			mustExpect(t, f.answer(t, bad, "succeeded"), http.StatusNotFound, "not_found")
		}
		mustExpect(t, f.answer(t, linkA, "maybe"), http.StatusBadRequest, "parameter_invalid")
		// Capture and refund are refused; the charge still waits.
		mustExpect(t, f.do(t, http.MethodPost, "/v1/charges/"+a.ID+"/capture", ""), http.StatusConflict, "invalid_state")
		mustExpect(t, f.do(t, http.MethodPost, "/v1/refunds", `{"charge":"`+a.ID+`"}`), http.StatusConflict, "invalid_state")
		time.Sleep(300 * time.Millisecond)
		if got := f.get(t, a.ID); got.Status != "requires_action" {
			t.Fatalf("after capture and refund attempts: %s", got.Status)
		}
		// A void cancels it; the link is then closed.
		mustExpect(t, f.do(t, http.MethodPost, "/v1/charges/"+a.ID+"/void", ""), http.StatusOK, "")
		if got := f.wait(t, a.ID, 20*time.Second, "requires_action"); got.Status != "voided" || got.Authentication.Status != "failed" {
			t.Errorf("void of a charge that requires action: %s, authentication %s", got.Status, got.Authentication.Status)
		}
		mustExpect(t, f.answer(t, linkA, "succeeded"), http.StatusConflict, "invalid_state")
		// The other charge is untouched and still answerable.
		mustExpect(t, f.answer(t, linkB, "succeeded"), http.StatusSeeOther, "")
		if got := f.wait(t, b.ID, 20*time.Second, "requires_action"); got.Status != "captured" {
			t.Errorf("charge b: %s", got.Status)
		}
	})

	t.Run("without_return_url_the_card_field_shows_it", func(t *testing.T) {
		c := f.charge(t, threeDSBody("4000002500003155", `,"capture":false`))
		c = f.wait(t, c.ID, 20*time.Second, "created")
		if c.Status != "requires_action" || c.NextAction == nil || c.NextAction.Type != "use_gatehouse_js" || c.NextAction.RedirectToURL != nil {
			t.Fatalf("without return_url: %s, next_action %+v", c.Status, c.NextAction)
		}
		stored := queryString(t, st, fmt.Sprintf(`SELECT next_action_url FROM charges WHERE id = '%s'`, c.ID))
		link := st.replicas[1] + stored[strings.Index(stored, "/authenticate/"):]
		done := f.answer(t, link, "succeeded")
		mustExpect(t, done, http.StatusOK, "")
		if !strings.Contains(string(done.body), `data-charge="`+c.ID+`"`) {
			t.Fatalf("the page after the challenge does not name the charge for the card field: %s", done.body)
		}
		if got := f.wait(t, c.ID, 20*time.Second, "requires_action"); got.Status != "authorized" {
			t.Errorf("capture false after authentication: %s", got.Status)
		}
	})

	t.Run("events_and_webhook_subscriptions", func(t *testing.T) {
		e := f.do(t, http.MethodPost, "/v1/me/webhook_endpoints", `{"url":"https://hooks.example.com/3ds","events":["charge.requires_action"]}`)
		mustExpect(t, e, http.StatusCreated, "")
		c := f.charge(t, threeDSBody("4000002760003184", ret))
		f.challenge(t, c.ID)
		types := countTypes(eventsOfCharge(t, f.events(t), c.ID))
		if types["charge.requires_action"] != 1 || types["charge.created"] != 1 {
			t.Errorf("events of a charge that requires action: %v", types)
		}
		if n := queryInt(t, st.db, `SELECT count(*) FROM webhook_deliveries d JOIN events e ON e.id = d.event_id
			WHERE e.charge_id = $1 AND e.type = 'charge.requires_action'`, c.ID); n != 1 {
			t.Errorf("deliveries of charge.requires_action: %d, want 1", n)
		}
	})
}

// TestAuthenticationTimeout: a cardholder who never answers leaves the
// charge failed authentication_expired once AUTHENTICATION_TIMEOUT passes;
// the provider's payment is cancelled and the link closed.
func TestAuthenticationTimeout(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{env: append([]string{"AUTHENTICATION_TIMEOUT=2s"}, chargesStackEnv...), workerEnv: chargesWorkerEnv},
		"authentication timeout")
	setup := newClient(t, "127.0.0.73")
	_, token := st.signUp(t, setup, "timeout", "Timeout Shop")
	key := st.newKey(t, setup, token, "timeout").SecretKey
	f := &authFlow{payments: &payments{st: st, c: newClient(t, "127.0.0.74"), key: key}, browser: browserClient(t, "127.0.0.75")}
	c, link := f.challenge(t, f.charge(t, threeDSBody("4000002500003155", `,"return_url":"https://shop.example/r"`)).ID)
	began := time.Now()
	got := f.wait(t, c.ID, 30*time.Second, "requires_action")
	if got.Status != "failed" || deref(got.FailureCode) != "authentication_expired" || got.Authentication.Status != "failed" {
		t.Fatalf("after the timeout: %s %q, authentication %s", got.Status, deref(got.FailureCode), got.Authentication.Status)
	}
	t.Logf("expired %s after the charge was seen waiting (timeout 2s)", time.Since(began).Round(100*time.Millisecond))
	mustExpect(t, f.answer(t, link, "succeeded"), http.StatusConflict, "invalid_state")
	if n := queryInt(t, st.db, `SELECT count(*) FROM sandbox_ledger WHERE operation = 'void' AND reference = $1`, deref(got.ProviderReference)); n != 1 {
		t.Errorf("cancellations at the provider: %d, want 1", n)
	}
	if n := queryInt(t, st.db, `SELECT count(*) FROM charges WHERE id = $1 AND card_sealed IS NOT NULL`, c.ID); n != 0 {
		t.Errorf("the expired charge still keeps its sealed card")
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func queryString(t *testing.T, st *stack, sql string) string {
	t.Helper()
	ctx, cancel := dbCtx()
	defer cancel()
	var s string
	if err := st.db.Pool.QueryRow(ctx, sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// TestSavedCardsOffSession: saved cards are charged on and off session as
// the sandbox's 3-D Secure cards say; an expired saved card fails without a
// provider call; and once a customer and its cards are deleted, neither a
// card number nor the sealed card data is anywhere in a dump of the
// database (the B5 scan, run right after the deletions).
func TestSavedCardsOffSession(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{env: chargesStackEnv, workerEnv: chargesWorkerEnv}, "saved cards off session")
	setup := newClient(t, "127.0.0.76")
	_, token := st.signUp(t, setup, "saved", "Saved Cards Shop")
	key := st.newKey(t, setup, token, "saved")
	f := &authFlow{payments: &payments{st: st, c: newClient(t, "127.0.0.77"), key: key.SecretKey}, browser: browserClient(t, "127.0.0.78")}

	e := f.do(t, http.MethodPost, "/v1/customers", `{"email":"ada@example.com","name":"Ada"}`)
	mustExpect(t, e, http.StatusCreated, "")
	var cus struct{ ID string }
	decode(t, e, &cus)
	save := func(number string, fromToken bool) string {
		t.Helper()
		card := fmt.Sprintf(`{"number":%q,"exp_month":12,"exp_year":%d,"cvc":"123"}`, number, time.Now().Year()+2)
		if fromToken {
			card = `{"token":"` + st.cardToken(t, f.c, st.replicas[0], key.PublicKey, number) + `"}`
		}
		e := f.do(t, http.MethodPost, "/v1/customers/"+cus.ID+"/payment_methods", `{"card":`+card+`}`)
		mustExpect(t, e, http.StatusCreated, "")
		var pm struct{ ID string }
		decode(t, e, &pm)
		return pm.ID
	}
	chargeSaved := func(pm, extra string) authCharge {
		t.Helper()
		c := f.charge(t, `{"amount":1500,"currency":"eur","customer":"`+cus.ID+`","card":{"payment_method":"`+pm+`"}`+extra+`}`)
		if c.PaymentMethod != pm || deref(c.Customer) != cus.ID {
			t.Fatalf("charge of %s shows payment_method %q customer %q", pm, c.PaymentMethod, deref(c.Customer))
		}
		return f.wait(t, c.ID, 20*time.Second, "created")
	}
	const off = `,"off_session":true`

	mandate := save("4000002500003155", true)
	if got := chargeSaved(mandate, off); got.Status != "failed" || deref(got.FailureCode) != "authentication_required" || !got.OffSession {
		t.Fatalf("off session before any authentication: %s %q", got.Status, deref(got.FailureCode))
	}
	on := chargeSaved(mandate, `,"return_url":"https://shop.example/done"`)
	if on.Status != "requires_action" {
		t.Fatalf("on session: %s", on.Status)
	}
	mustExpect(t, f.answer(t, on.NextAction.RedirectToURL.URL, "succeeded"), http.StatusSeeOther, "")
	if got := f.wait(t, on.ID, 20*time.Second, "requires_action"); got.Status != "captured" {
		t.Fatalf("on session after the challenge: %s", got.Status)
	}
	if got := chargeSaved(mandate, off); got.Status != "captured" || got.NextAction != nil {
		t.Errorf("off session after an authenticated charge: %s %q", got.Status, deref(got.FailureCode))
	}
	always := save("4000002760003184", false)
	if got := chargeSaved(always, off); got.Status != "failed" || deref(got.FailureCode) != "authentication_required" {
		t.Errorf("4000002760003184 off session: %s %q", got.Status, deref(got.FailureCode))
	}
	if got := chargeSaved(always, ""); got.Status != "requires_action" {
		t.Errorf("4000002760003184 on session: %s", got.Status)
	}
	if got := chargeSaved(save("4000008260003178", false), off); got.Status != "failed" || deref(got.FailureCode) != "authentication_required" {
		t.Errorf("4000008260003178 off session: %s %q", got.Status, deref(got.FailureCode))
	}
	if got := chargeSaved(save("4000000000003055", false), off); got.Status != "captured" {
		t.Errorf("frictionless card off session: %s", got.Status)
	}

	// An expired saved card fails expired_card and the provider hears nothing.
	expired := save("4242424242424242", false)
	ctx, cancel := dbCtx()
	if _, err := st.db.Pool.Exec(ctx, `UPDATE payment_methods SET card_exp_year = 2021 WHERE id = $1`, expired); err != nil {
		t.Fatal(err)
	}
	cancel()
	got := chargeSaved(expired, off)
	if got.Status != "failed" || deref(got.FailureCode) != "expired_card" {
		t.Errorf("expired saved card: %s %q", got.Status, deref(got.FailureCode))
	}
	if n := queryInt(t, st.db, `SELECT count(*) FROM sandbox_ledger WHERE idempotency_key LIKE '%' || $1 || '%'`, got.ID); n != 0 {
		t.Errorf("the expired saved card reached the provider (%d calls)", n)
	}

	// Bad requests change nothing.
	other := f.do(t, http.MethodPost, "/v1/customers", `{"name":"Other"}`)
	var otherCus struct{ ID string }
	decode(t, other, &otherCus)
	for body, param := range map[string]string{
		`{"amount":100,"currency":"eur","customer":"` + otherCus.ID + `","card":{"payment_method":"` + mandate + `"}}`: "card.payment_method",
		`{"amount":100,"currency":"eur","card":{"payment_method":"` + mandate + `"}}`:                                  "customer",
		threeDSBody("4242424242424242", off):                                   "off_session",
		threeDSBody("4242424242424242", `,"return_url":"ftp://shop.example/"`): "return_url",
	} {
		e := f.do(t, http.MethodPost, "/v1/charges", body)
		if e.status() != http.StatusBadRequest || !strings.Contains(string(e.body), `"param":"`+param+`"`) {
			t.Errorf("%s: %s, want 400 naming %s", body, e, param)
		}
	}

	// The customer's charges, and only them.
	list := f.do(t, http.MethodGet, "/v1/charges?limit=100&customer="+cus.ID, "")
	mustExpect(t, list, http.StatusOK, "")
	var page struct{ Data []authCharge }
	decode(t, list, &page)
	if len(page.Data) != 8 {
		t.Errorf("charges of the customer: %d, want 8", len(page.Data))
	}
	for _, c := range page.Data {
		if deref(c.Customer) != cus.ID {
			t.Errorf("charge %s of customer %q listed for %s", c.ID, deref(c.Customer), cus.ID)
		}
	}

	// Deletion destroys the sealed cards: a method, then the customer.
	sealed := func() [][]byte {
		ctx, cancel := dbCtx()
		defer cancel()
		rows, err := st.db.Pool.Query(ctx, `SELECT card_sealed FROM payment_methods WHERE customer_id = $1`, cus.ID)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out [][]byte
		for rows.Next() {
			var b []byte
			if err := rows.Scan(&b); err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
		return out
	}
	before := sealed()
	if len(before) != 5 {
		t.Fatalf("sealed saved cards before deletion: %d, want 5", len(before))
	}
	mustExpect(t, f.do(t, http.MethodDelete, "/v1/customers/"+cus.ID+"/payment_methods/"+always, ""), http.StatusOK, "")
	mustExpect(t, f.do(t, http.MethodDelete, "/v1/customers/"+cus.ID, ""), http.StatusOK, "")
	if left := sealed(); len(left) != 0 {
		t.Fatalf("%d sealed cards left after the deletions", len(left))
	}
	// The charge that still waits for its cardholder keeps its own copy until
	// it ends; void it so nothing of the deleted cards is left anywhere.
	for _, c := range page.Data {
		if c.Status == "requires_action" {
			mustExpect(t, f.do(t, http.MethodPost, "/v1/charges/"+c.ID+"/void", ""), http.StatusOK, "")
			f.wait(t, c.ID, 20*time.Second, "requires_action")
		}
	}
	dctx, dcancel := dbCtx()
	defer dcancel()
	dump, err := dumpDatabase(dctx, st.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range scanDump(dump) {
		t.Errorf("after the deletions: %s", h)
	}
	hexDump := strings.ToLower(string(dump))
	for i, b := range before {
		if strings.Contains(hexDump, fmt.Sprintf("%x", b)) {
			t.Errorf("sealed card %d of the deleted customer is still in the database dump", i)
		}
	}
	if n := queryInt(t, st.db, `SELECT count(*) FROM charges WHERE customer_id = $1 AND card_sealed IS NOT NULL`, cus.ID); n != 0 {
		t.Errorf("%d charges of the deleted customer keep sealed card data", n)
	}
}
