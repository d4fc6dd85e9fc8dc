package httpapi_test

// The dashboard's customers and 3-D Secure: the customers list and a
// customer's page (its saved cards and its charges), the deletion of a card
// and of a customer through their forms, and charges that wait for the
// cardholder in the charges pages.

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
)

// rowsOf lists the values of attr in the page's tr elements, in order.
func rowsOf(body, attr string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<tr `+attr+`="([^"]+)"`).FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestDashboardCustomers: the customers list (filtered by email in any
// case, paged), a customer's page with its saved cards (brand, last 4,
// expiry, fingerprint, whether authenticated) and its charges only, the
// charge pages naming the customer and the saved card, another merchant's
// 404, and the delete forms: refused without the CSRF token, and with it
// deleting the rows (the customer's charges stay).
func TestDashboardCustomers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	w := h.worker(t, &providertest.Fake{})
	a := h.account("gil@example.com")
	h.account("hal@example.com")
	buyer := h.newCustomer(t, a.secret, `{"email":"Buyer@Example.com","name":"Ada Buyer","description":"VIP","metadata":{"tier":"gold"}}`).body["id"].(string)
	other := h.newCustomer(t, a.secret, `{"email":"other@example.com"}`).body["id"].(string)
	visa := h.saveCard(t, a.secret, buyer, rawCardJSON(cardVisa, "123"))
	want(t, visa, 201, "")
	master := h.saveCard(t, a.secret, buyer, rawCardJSON(cardMastercard, "123"))
	want(t, master, 201, "")
	pmVisa, pmMaster := visa.body["id"].(string), master.body["id"].(string)
	fingerprint := obj(visa.body["card"])["fingerprint"].(string)
	saved := h.createCharge(t, a.secret, chargeJSON(set("customer", buyer), set("card", map[string]any{"payment_method": pmVisa}))).body["id"].(string)
	w.authorize(t, saved)
	unrelated := h.capturedCharge(t, w, a.secret, 1500)
	// The cardholder authenticated an earlier charge of the Mastercard.
	if _, err := h.db.Pool.Exec(context.Background(), `UPDATE payment_methods SET authenticated_at = now() WHERE id = $1`, pmMaster); err != nil {
		t.Fatal(err)
	}

	d := h.dashClientSignedIn(t, "gil@example.com")
	if p := d.get("/dashboard/customers"); p.status != 200 || !slices.Equal(rowsOf(p.body, "data-customer"), []string{other, buyer}) ||
		!strings.Contains(p.body, `href="/dashboard/customers" aria-current="page"`) {
		t.Errorf("customers list: %d, rows %v, want %v with the nav link current", p.status, rowsOf(p.body, "data-customer"), []string{other, buyer})
	}
	if p := d.get("/dashboard/customers?email=" + url.QueryEscape("buyer@EXAMPLE.com")); !slices.Equal(rowsOf(p.body, "data-customer"), []string{buyer}) {
		t.Errorf("customers filtered by email in another case: %v, want [%s]", rowsOf(p.body, "data-customer"), buyer)
	}
	if p := d.get("/dashboard/customers?email=nobody@example.com"); p.status != 200 || len(rowsOf(p.body, "data-customer")) != 0 ||
		!strings.Contains(p.body, "No customer has this email.") {
		t.Errorf("an email of no customer: %d, rows %v", p.status, rowsOf(p.body, "data-customer"))
	}
	if p := d.get("/dashboard/customers?starting_after=" + other); !slices.Equal(rowsOf(p.body, "data-customer"), []string{buyer}) ||
		!strings.Contains(p.body, `id="prev-page"`) {
		t.Errorf("the page after %s: %v, want [%s] with a link back", other, rowsOf(p.body, "data-customer"), buyer)
	}
	for _, q := range []string{"starting_after=nope", "email=" + strings.Repeat("x", 600)} {
		if p := d.get("/dashboard/customers?" + q); p.status != 400 || !strings.Contains(p.body, "parameter_invalid") {
			t.Errorf("GET /dashboard/customers?%.40s: %d, want 400", q, p.status)
		}
	}

	page := d.get("/dashboard/customers/" + buyer)
	if page.status != 200 {
		t.Fatalf("the customer's page: %d\n%.500s", page.status, page.body)
	}
	checkDashboardHeaders(t, "the customer's page", page)
	for _, s := range []string{"Ada Buyer", "Buyer@Example.com", "VIP", "metadata.tier", "gold", "visa", "•••• 4242", "mastercard", "•••• 4444",
		"12/" + strconv.Itoa(expYear), fingerprint} {
		if !strings.Contains(page.body, s) {
			t.Errorf("the customer's page does not show %q", s)
		}
	}
	if got := rowsOf(page.body, "data-payment-method"); !slices.Equal(got, []string{pmMaster, pmVisa}) {
		t.Errorf("saved cards %v, want %v", got, []string{pmMaster, pmVisa})
	}
	for pm, authenticated := range map[string]string{pmMaster: "true", pmVisa: "false"} {
		if !regexp.MustCompile(`data-payment-method="` + pm + `">(?s:.)*?data-authenticated="` + authenticated + `"`).MatchString(page.body) {
			t.Errorf("saved card %s: authenticated should read %s", pm, authenticated)
		}
	}
	if got := rowsOf(page.body, "data-charge"); !slices.Equal(got, []string{saved}) {
		t.Errorf("the customer's charges %v, want only [%s] (not %s)", got, saved, unrelated)
	}

	// The charge names its customer (a link) and its saved card.
	cp := d.get("/dashboard/charges/" + saved)
	if !strings.Contains(cp.body, `<a href="/dashboard/customers/`+buyer+`">`) || !strings.Contains(cp.body, `id="charge-payment-method">`+pmVisa) ||
		!strings.Contains(cp.body, `data-authentication="not_required"`) {
		t.Errorf("the charge's page does not link its customer, name its saved card and its authentication\n%.3000s", cp.body)
	}
	if list := d.get("/dashboard/charges"); !strings.Contains(list.body, `data-customer="`+buyer+`"`) || !strings.Contains(list.body, `data-payment-method="`+pmVisa+`"`) {
		t.Error("the charges list does not show the charge's customer and saved card")
	}

	// Another merchant: 404, like an unknown customer, and nothing deleted.
	hd := h.dashClientSignedIn(t, "hal@example.com")
	before := h.state(t, a.merchantID)
	for _, r := range []dashPage{
		hd.get("/dashboard/customers/" + buyer),
		hd.post("/dashboard/customers/"+buyer+"/payment_methods/"+pmVisa+"/delete", nil),
		hd.post("/dashboard/customers/"+buyer+"/delete", nil),
	} {
		if r.status != 404 || strings.Contains(r.body, "Ada Buyer") || strings.Contains(r.body, buyer) {
			t.Errorf("another merchant on A's customer: %d\n%.400s", r.status, r.body)
		}
	}
	if p := hd.get("/dashboard/customers"); len(rowsOf(p.body, "data-customer")) != 0 {
		t.Errorf("another merchant's list shows %v", rowsOf(p.body, "data-customer"))
	}

	// The delete forms need the session's CSRF token.
	own := d.csrf
	d.csrf = ""
	for _, p := range []string{"/dashboard/customers/" + buyer + "/payment_methods/" + pmMaster + "/delete", "/dashboard/customers/" + buyer + "/delete"} {
		if r := d.post(p, nil); r.status != 403 || !strings.Contains(r.body, "csrf_token_invalid") {
			t.Errorf("POST %s without the token: %d", p, r.status)
		}
		if r := d.post(p, nil, "Sec-Fetch-Site", "cross-site"); r.status != 403 {
			t.Errorf("POST %s from another site: %d", p, r.status)
		}
	}
	d.csrf = own
	if diff := stateDiff(before, h.state(t, a.merchantID)); diff != "" {
		t.Errorf("refused deletions changed: %s", diff)
	}

	// Delete a saved card: its row (and sealed card) is gone.
	r := d.post("/dashboard/customers/"+buyer+"/payment_methods/"+pmMaster+"/delete", nil)
	if r.status != 303 || r.location != "/dashboard/customers/"+buyer+"?notice=card_deleted" {
		t.Fatalf("delete the card: %d to %q\n%.400s", r.status, r.location, r.body)
	}
	if n := h.count(t, `SELECT count(*) FROM payment_methods WHERE id = $1`, pmMaster) +
		h.count(t, `SELECT count(*) FROM payment_method_keys WHERE payment_method_id = $1`, pmMaster); n != 0 {
		t.Errorf("the deleted card's row or data key is still there")
	}
	if p := d.get(r.location); !slices.Equal(rowsOf(p.body, "data-payment-method"), []string{pmVisa}) || !strings.Contains(p.body, `id="notice"`) {
		t.Errorf("after the deletion the page lists %v", rowsOf(p.body, "data-payment-method"))
	} else if strings.Contains(p.body, "erased") || !strings.Contains(p.body, "with the key that sealed it") {
		t.Errorf("the notice and forms claim more than a deletion does:\n%s", p.body)
	}
	if r := d.post("/dashboard/customers/"+buyer+"/payment_methods/"+pmMaster+"/delete", nil); r.status != 404 {
		t.Errorf("deleting it again: %d, want 404", r.status)
	}
	// Delete the customer: it and its cards are gone; its charges stay.
	r = d.post("/dashboard/customers/"+buyer+"/delete", nil)
	if r.status != 303 || r.location != "/dashboard/customers?notice=customer_deleted" {
		t.Fatalf("delete the customer: %d to %q\n%.400s", r.status, r.location, r.body)
	}
	if n := h.count(t, `SELECT count(*) FROM customers WHERE id = $1`, buyer) + h.count(t, `SELECT count(*) FROM payment_methods WHERE customer_id = $1`, buyer) +
		h.count(t, `SELECT count(*) FROM payment_method_keys WHERE payment_method_id = $1`, pmVisa); n != 0 {
		t.Errorf("%d rows of the deleted customer remain", n)
	}
	if p := d.get("/dashboard/customers"); !slices.Equal(rowsOf(p.body, "data-customer"), []string{other}) {
		t.Errorf("after the deletion the list shows %v", rowsOf(p.body, "data-customer"))
	}
	if p := d.get("/dashboard/customers/" + buyer); p.status != 404 {
		t.Errorf("the deleted customer's page: %d", p.status)
	}
	if p := d.get("/dashboard/charges/" + saved); p.status != 200 || !strings.Contains(p.body, "(deleted)") {
		t.Errorf("the charge of the deleted customer: %d, deleted customer shown %v", p.status, strings.Contains(p.body, "(deleted)"))
	}
}

// TestDashboardRequiresAction: a charge that waits for the cardholder's
// authentication is in the charges list (its status a filter), its page
// shows the pending authentication and the void form, and the void goes
// through; charge.requires_action is an event type of the events page.
func TestDashboardRequiresAction(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	w := h.worker(t, &providertest.Fake{AuthorizeFn: func(_ context.Context, r providers.AuthorizeRequest) (providers.Result, error) {
		return providers.Result{Reference: "fake_" + r.IdempotencyKey, Action: &providers.Action{RedirectURL: "https://issuer.example/challenge"}}, nil
	}})
	a := h.account("ivy@example.com")
	id := h.createCharge(t, a.secret, chargeJSON(set("return_url", "https://shop.example/done"))).body["id"].(string)
	w.authorize(t, id)
	if got := h.chargeRow(t, id).Status; got != "requires_action" {
		t.Fatalf("the charge is %s, want requires_action", got)
	}

	d := h.dashClientSignedIn(t, "ivy@example.com")
	list := d.get("/dashboard/charges?status=requires_action")
	if list.status != 200 || !slices.Equal(rowsOf(list.body, "data-charge"), []string{id}) ||
		!strings.Contains(list.body, `<option value="requires_action" selected>`) || !strings.Contains(list.body, `data-authentication="pending"`) {
		t.Errorf("charges with status requires_action: %d, rows %v", list.status, rowsOf(list.body, "data-charge"))
	}
	if p := d.get("/dashboard/charges?status=captured"); len(rowsOf(p.body, "data-charge")) != 0 {
		t.Errorf("captured charges list %v", rowsOf(p.body, "data-charge"))
	}
	page := d.get("/dashboard/charges/" + id)
	if !strings.Contains(page.body, `data-status="requires_action"`) || !strings.Contains(page.body, `id="charge-authentication" data-authentication="pending"`) ||
		!strings.Contains(page.body, `id="void"`) || strings.Contains(page.body, `id="capture"`) || strings.Contains(page.body, `data-busy="true"`) {
		t.Errorf("the page of a charge that requires action: no pending authentication or void form, or a capture form, or reloading\n%.3000s", page.body)
	}
	r := d.post("/dashboard/charges/"+id+"/void", nil)
	if r.status != http.StatusSeeOther || r.location != "/dashboard/charges/"+id+"?notice=void" {
		t.Fatalf("void: %d to %q\n%.500s", r.status, r.location, r.body)
	}
	if row := h.chargeRow(t, id); row.PendingAction == nil || *row.PendingAction != "void" {
		t.Errorf("after the void the charge's pending action is %v, want void", row.PendingAction)
	}
	if p := d.get("/dashboard/charges/" + id); strings.Contains(p.body, `id="void"`) || !strings.Contains(p.body, `data-busy="true"`) {
		t.Error("with the void pending the page still offers a void, or does not reload")
	}

	events := d.get("/dashboard/events?type=charge.requires_action")
	if !strings.Contains(events.body, `<option value="charge.requires_action" selected>`) || len(rowsOf(events.body, "data-event-type")) != 1 {
		t.Errorf("events of type charge.requires_action: %v", rowsOf(events.body, "data-event-type"))
	}
}
