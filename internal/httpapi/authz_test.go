package httpapi_test

// docs/reliability.md A1-A4: the authorization matrix of every route, attacks on
// session tokens, login timing, and read-only fields in request bodies. The
// matrix is keyed by the routes the app actually serves, so a route added
// without a row here fails TestAuthzMatrix.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gofiber/fiber/v2"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
	"github.com/gatehouse-pay/gatehouse/internal/reconcile"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// accepts is the credential a route takes.
type accepts int

const (
	public        accepts = iota // no Authorization header
	sessionOnly                  // a dashboard session token
	keyOnly                      // a secret API key
	sessionOrKey                 // either
	publicKeyOnly                // a public key (POST /v1/tokens)
)

func (a accepts) session() bool { return a == sessionOnly || a == sessionOrKey }
func (a accepts) key() bool     { return a == keyOnly || a == sessionOrKey }

func (a accepts) String() string {
	return [...]string{"public", "session", "secret key", "session or secret key", "public key"}[a]
}

// Kinds of objects a merchant owns, as the fixture creates them.
const (
	kindCharge     = "charge"            // a captured charge
	kindAuthorized = "authorized_charge" // a charge waiting for capture or void
	kindRefund     = "refund"
	kindEvent      = "event"
	kindEndpoint   = "endpoint" // an endpoint with one failed delivery
	kindDelivery   = "delivery" // a failed delivery
	kindAPIKey     = "api_key"  // a key other than the one the merchant signs with
	kindCustomer   = "customer" // a customer
	// kindPaymentMethod is a saved card; its route names its customer too
	// (see customerOfMethod).
	kindPaymentMethod = "payment_method"
	kindConnector     = "connector" // a sandbox connector the routing does not name
	kindMember        = "member"    // an invited member of the team
	kindPayout        = "payout"    // a payout made by hand
	// kindReconciliation is an uploaded report of one line the books lack;
	// kindException is its exception (see reconciliationOfException).
	kindReconciliation = "reconciliation"
	kindException      = "reconciliation_exception"
	kindDispute        = "dispute" // a dispute waiting for evidence, of a captured charge
)

// tableOf groups kinds that share ids, for the "id of another kind" cases.
var tableOf = map[string]string{
	kindCharge: "charges", kindAuthorized: "charges", kindRefund: "refunds", kindEvent: "events",
	kindEndpoint: "webhook_endpoints", kindDelivery: "webhook_deliveries", kindAPIKey: "api_keys",
	kindCustomer: "customers", kindPaymentMethod: "payment_methods", kindConnector: "connectors", kindMember: "members",
	kindPayout:         "payouts",
	kindReconciliation: "reconciliations", kindException: "reconciliation_exceptions", kindDispute: "disputes",
}

// prefixedKinds have ids like key_... rather than UUIDs.
var prefixedKinds = map[string]bool{kindAPIKey: true, kindEndpoint: true, kindCustomer: true, kindPaymentMethod: true, kindConnector: true, kindMember: true,
	kindPayout: true, kindReconciliation: true, kindException: true, kindDispute: true}

// customerOfMethod maps the fixtures' payment method ids to their
// customers', for the routes that name both.
var customerOfMethod sync.Map

// reconciliationOfException maps the fixtures' exception ids to their
// reconciliations', for the route that names both.
var reconciliationOfException sync.Map

// authzRoute is one row of the matrix: who may call the route and how.
type authzRoute struct {
	auth accepts
	// idKind is the kind of object the route names: by :id in the path, or
	// (POST /v1/refunds) by a field of the body. "" when it names none.
	idKind string
	// madeUp is the :id of a route whose objects no fixture has: an id of
	// the right shape that names nothing.
	madeUp string
	// lists is the kind of objects a list route returns.
	lists string
	// query is appended to the path.
	query string
	// body is the request body for the caller's fixture and the object id.
	body func(f *authzFixture, id string) string
	// filters are extra list queries that name the other merchant's objects.
	filters func(other *authzFixture) []string
	// ok is the status of this call by the owner of the object.
	ok int
	// stream marks a response that does not end (GET /v1/events/stream):
	// its successful calls are TestEventStream's.
	stream bool
}

func fixed(body string) func(*authzFixture, string) string {
	return func(*authzFixture, string) string { return body }
}

const matrixPassword = "correct horse battery"

// authzRoutes is the authorization matrix, keyed "METHOD /path" as routes.go
// spells the route.
var authzRoutes = map[string]authzRoute{
	"POST /v1/auth/login": {auth: public, ok: 200, body: func(f *authzFixture, _ string) string {
		return `{"email":"` + f.email + `","password":"` + matrixPassword + `"}`
	}},
	"DELETE /v1/auth/logout": {auth: sessionOnly, ok: 204},
	// The setup link's token is the credential (TestMembers); a made-up one is refused.
	"POST /v1/auth/setup": {auth: public, ok: 400, body: fixed(`{"token":"made-up","password":"` + matrixPassword + `"}`)},

	"POST /v1/me/members": {auth: sessionOnly, ok: 201, body: func(*authzFixture, string) string {
		return `{"email":"invitee-` + uuid.NewString() + `@example.com","role":"viewer"}`
	}},
	"GET /v1/me/members":        {auth: sessionOnly, ok: 200, lists: kindMember},
	"GET /v1/me/members/:id":    {auth: sessionOnly, ok: 200, idKind: kindMember},
	"PATCH /v1/me/members/:id":  {auth: sessionOnly, ok: 200, idKind: kindMember, body: fixed(`{"role":"support"}`)},
	"DELETE /v1/me/members/:id": {auth: sessionOnly, ok: 200, idKind: kindMember},

	// The challenge is the credential (TestTwoFactor); a made-up one is refused.
	"POST /v1/auth/mfa":    {auth: public, ok: 401, body: fixed(`{"challenge":"mfa_made-up","code":"123456"}`)},
	"POST /v1/me/mfa/totp": {auth: sessionOnly, ok: 200},
	// A malformed code is refused before anything is looked up (TestTwoFactor confirms).
	"POST /v1/me/mfa/totp/confirm":  {auth: sessionOnly, ok: 400, body: fixed(`{"code":"x"}`)},
	"GET /v1/me/settings":           {auth: sessionOnly, ok: 200},
	"PATCH /v1/me/settings":         {auth: sessionOnly, ok: 200, body: fixed(`{"mfa_required":false}`)},
	"GET /v1/me":                    {auth: sessionOrKey, ok: 200},
	"POST /v1/me/api_keys":          {auth: sessionOnly, ok: 201, body: fixed(`{"name":"matrix","type":"restricted"}`)},
	"GET /v1/me/api_keys":           {auth: sessionOrKey, ok: 200, lists: kindAPIKey},
	"DELETE /v1/me/api_keys/:id":    {auth: keyOnly, ok: 200, idKind: kindAPIKey},
	"POST /v1/me/api_keys/:id/roll": {auth: sessionOnly, ok: 201, idKind: kindAPIKey, body: fixed(`{"expires_in":60}`)},
	"GET /v1/audit_log":             {auth: sessionOnly, ok: 200},

	"POST /v1/charges":          {auth: keyOnly, ok: 201, body: fixed(chargeJSON(set("amount", 700)))},
	"OPTIONS /v1/tokens":        {auth: public, ok: 204},
	"GET /js/v1/gatehouse.js":   {auth: public, ok: 200},
	"GET /elements/v1/card":     {auth: public, ok: 200},
	"GET /elements/v1/card.js":  {auth: public, ok: 200},
	"GET /elements/v1/card.css": {auth: public, ok: 200},
	"POST /v1/tokens":           {auth: publicKeyOnly, ok: 201, body: fixed(tokenCard)},
	// The card field's view of a charge it collected the card of: none of
	// the fixture's charges came from the named token.
	"POST /elements/v1/next_action": {auth: publicKeyOnly, ok: 404, body: fixed(`{"charge":"0190f4b6-3c2a-7d4e-8f00-000000000001","tokens":["ctok_unknown"]}`)},
	// The challenge pages: the link is the credential (TestChallengeLinks);
	// the route's own path is no link.
	"GET /authenticate/v1/challenge.js":      {auth: public, ok: 200},
	"GET /authenticate/v1/challenge.css":     {auth: public, ok: 200},
	"GET /authenticate/v1/:id/:token":        {auth: public, ok: 404},
	"POST /authenticate/v1/:id/:token":       {auth: public, ok: 404},
	"GET /authenticate/v1/:id/:token/return": {auth: public, ok: 404},
	"GET /v1/charges": {auth: keyOnly, ok: 200, lists: kindCharge, filters: func(o *authzFixture) []string {
		return []string{"status=captured", "status=authorized", "created[gte]=2020-01-01T00:00:00Z"}
	}},
	"GET /v1/charges/:id":          {auth: keyOnly, ok: 200, idKind: kindCharge},
	"POST /v1/charges/:id/capture": {auth: keyOnly, ok: 200, idKind: kindAuthorized, body: fixed(`{"amount":100}`)},
	"POST /v1/charges/:id/void":    {auth: keyOnly, ok: 200, idKind: kindAuthorized},

	"POST /v1/refunds": {auth: keyOnly, ok: 201, idKind: kindCharge, body: func(_ *authzFixture, id string) string {
		return refundJSON(id, `"amount":1`)
	}},
	"GET /v1/refunds": {auth: keyOnly, ok: 200, lists: kindRefund, filters: func(o *authzFixture) []string {
		return []string{"charge=" + o.ids[kindCharge][0]}
	}},
	"GET /v1/refunds/:id": {auth: keyOnly, ok: 200, idKind: kindRefund},

	// The fixtures have no balance (nothing is captured without a worker):
	// a payout is refused for it, and ids name nothing. Another merchant's
	// payouts and transactions are its own: internal/e2e's ledger tests.
	"GET /v1/balance":                  {auth: keyOnly, ok: 200},
	"GET /v1/balance_transactions":     {auth: keyOnly, ok: 200, query: "type=charge"},
	"GET /v1/balance_transactions/:id": {auth: keyOnly, ok: 404, madeUp: "txn_06h21drmp9u29dkegv9s209f08"},
	"POST /v1/payouts":                 {auth: keyOnly, ok: 409, body: fixed(`{"amount":100,"currency":"usd"}`)},
	"GET /v1/payouts":                  {auth: keyOnly, ok: 200},
	"GET /v1/payouts/:id":              {auth: keyOnly, ok: 404, madeUp: "po_06h21dscqtupdc4b6fl6b6lb3o"},
	// Nor disputes: only a provider opens one (internal/e2e's dispute
	// tests, for other merchants' too); the fixtures' disputes are rows
	// written for the dashboard's matrix (disputesOf).
	"GET /v1/disputes":            {auth: keyOnly, ok: 200, query: "status=needs_response"},
	"GET /v1/disputes/:id":        {auth: keyOnly, ok: 404, madeUp: "dp_06h21dscqtupdc4b6fl6b6lb3o"},
	"POST /v1/disputes/:id":       {auth: keyOnly, ok: 404, madeUp: "dp_06h21dscqtupdc4b6fl6b6lb3o", body: fixed(`{"evidence":{"uncategorized_text":"x"}}`)},
	"POST /v1/disputes/:id/close": {auth: keyOnly, ok: 404, madeUp: "dp_06h21dscqtupdc4b6fl6b6lb3o"},
	// Each fixture's reconciliations are uploads of one line its books lack
	// (one exception each); a resolution accepts it.
	"POST /v1/reconciliations": {auth: keyOnly, ok: 201, body: func(f *authzFixture, _ string) string {
		// A fixture without connectors (a request refused before its body
		// is read) names no one's.
		return reconciliationJSON(append(slices.Clone(f.ids[kindConnector]), "conn_00000000000000000000000000")[0], "sbx_ch_matrix")
	}},
	"GET /v1/reconciliations": {auth: keyOnly, ok: 200, lists: kindReconciliation, filters: func(o *authzFixture) []string {
		return []string{"connector=" + o.ids[kindConnector][0]}
	}},
	"GET /v1/reconciliations/:id": {auth: keyOnly, ok: 200, idKind: kindReconciliation},
	"GET /v1/reconciliations/:id/exceptions": {auth: keyOnly, ok: 200, idKind: kindReconciliation, lists: kindException,
		filters: func(*authzFixture) []string { return []string{"status=open", "kind=missing_in_gateway"} }},
	"POST /v1/reconciliations/:id/exceptions/:exc/resolve": {auth: keyOnly, ok: 200, idKind: kindException,
		body: fixed(`{"action":"accept","note":"matrix"}`)},
	"GET /v1/connectors/:id/settlement_report": {auth: keyOnly, ok: 200, idKind: kindConnector, query: "date=2026-11-27"},

	"POST /v1/customers": {auth: keyOnly, ok: 201, body: fixed(`{"email":"matrix@example.com","name":"Matrix"}`)},
	"GET /v1/customers": {auth: keyOnly, ok: 200, lists: kindCustomer, filters: func(o *authzFixture) []string {
		return []string{"email=" + url.QueryEscape(buyerEmail(o)), "email=" + url.QueryEscape(strings.ToUpper(buyerEmail(o)))}
	}},
	"GET /v1/customers/:id":                           {auth: keyOnly, ok: 200, idKind: kindCustomer},
	"PATCH /v1/customers/:id":                         {auth: keyOnly, ok: 200, idKind: kindCustomer, body: fixed(`{"name":"Patched","description":null}`)},
	"DELETE /v1/customers/:id":                        {auth: keyOnly, ok: 200, idKind: kindCustomer},
	"POST /v1/customers/:id/payment_methods":          {auth: keyOnly, ok: 201, idKind: kindCustomer, body: fixed(savedCardJSON)},
	"GET /v1/customers/:id/payment_methods":           {auth: keyOnly, ok: 200, idKind: kindCustomer, lists: kindPaymentMethod},
	"DELETE /v1/customers/:id/payment_methods/:pm_id": {auth: keyOnly, ok: 200, idKind: kindPaymentMethod},

	"POST /v1/connectors":                  {auth: keyOnly, ok: 201, body: fixed(`{"provider":"sandbox","name":"Matrix","sandbox":{"latency_ms":0}}`)},
	"GET /v1/connectors":                   {auth: keyOnly, ok: 200, lists: kindConnector},
	"GET /v1/connectors/:id":               {auth: keyOnly, ok: 200, idKind: kindConnector},
	"GET /v1/connectors/:id/notifications": {auth: keyOnly, ok: 200, idKind: kindConnector},
	// The provider's signature is the credential (TestProviderNotifications);
	// the fixture's connectors are the sandbox's, which take none.
	"POST /v1/provider_notifications/:connector_id": {auth: public, ok: 404, body: fixed(`{"id":"evt_1","type":"payment_intent.succeeded"}`)},
	"PATCH /v1/connectors/:id":                      {auth: keyOnly, ok: 200, idKind: kindConnector, body: fixed(`{"name":"Patched","sandbox":{"decline_code":null}}`)},
	"DELETE /v1/connectors/:id":                     {auth: keyOnly, ok: 200, idKind: kindConnector},
	"GET /v1/routing":                               {auth: keyOnly, ok: 200},
	"PUT /v1/routing":                               {auth: keyOnly, ok: 200, body: func(f *authzFixture, _ string) string { return routingOf(f) }},

	"POST /v1/me/webhook_endpoints":    {auth: keyOnly, ok: 201, body: fixed(endpointBody("https://hooks.example.com/matrix", "charge.captured"))},
	"GET /v1/me/webhook_endpoints":     {auth: keyOnly, ok: 200, lists: kindEndpoint},
	"GET /v1/me/webhook_endpoints/:id": {auth: keyOnly, ok: 200, idKind: kindEndpoint},
	"PATCH /v1/me/webhook_endpoints/:id": {auth: keyOnly, ok: 200, idKind: kindEndpoint,
		body: fixed(`{"active":false,"url":"https://hooks.example.com/patched"}`)},
	"DELETE /v1/me/webhook_endpoints/:id":             {auth: keyOnly, ok: 200, idKind: kindEndpoint},
	"POST /v1/me/webhook_endpoints/:id/rotate_secret": {auth: keyOnly, ok: 200, idKind: kindEndpoint},
	"POST /v1/me/webhook_endpoints/:id/test":          {auth: keyOnly, ok: 202, idKind: kindEndpoint},
	"POST /v1/me/webhook_endpoints/:id/recover": {auth: keyOnly, ok: 200, idKind: kindEndpoint,
		body: fixed(`{"since":"2020-01-01T00:00:00Z"}`)},
	"GET /v1/me/webhook_endpoints/:id/deliveries": {auth: keyOnly, ok: 200, idKind: kindEndpoint, lists: kindDelivery,
		filters: func(*authzFixture) []string { return []string{"status=failed"} }},
	"GET /v1/me/webhook_endpoints/:id/stats":        {auth: keyOnly, ok: 200, idKind: kindEndpoint},
	"POST /v1/webhook_deliveries/:id/retry":         {auth: keyOnly, ok: 202, idKind: kindDelivery},
	"GET /v1/me/webhook_client_certificate":         {auth: keyOnly, ok: 200},
	"POST /v1/me/webhook_client_certificate/rotate": {auth: keyOnly, ok: 200},

	"GET /v1/events": {auth: keyOnly, ok: 200, lists: kindEvent, filters: func(*authzFixture) []string {
		return []string{"type=charge.created", "type=refund.created"}
	}},
	"GET /v1/events/:id":    {auth: keyOnly, ok: 200, idKind: kindEvent},
	"GET /v1/events/stream": {auth: keyOnly, ok: 200, stream: true},
	"GET /v1/event_types":   {auth: keyOnly, ok: 200},
}

// served lists the app's routes as "METHOD /path", without the HEAD twins of
// GET routes and the operational endpoints (no merchant data, no auth).
func served(h *harness) []string {
	seen := map[string]bool{}
	for _, r := range h.app.GetRoutes(true) {
		switch {
		case r.Method == fiber.MethodHead, r.Path == "/healthz", r.Path == "/readyz", r.Path == "/metrics":
			continue
		case isDashboardPath(r.Path): // the cookie session: TestDashboardAuthz
			continue
		}
		seen[r.Method+" "+r.Path] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// request renders the route's call for the caller's fixture and an id. A
// route that names a payment method names its customer (as :id) too: the
// method's own, or for an id of no fixture's method the id itself.
func (r authzRoute) request(route string, f *authzFixture, id string) (method, path, body string) {
	method, path, _ = strings.Cut(route, " ")
	if strings.Contains(path, ":pm_id") {
		path = strings.Replace(path, ":pm_id", id, 1)
		if cus, ok := customerOfMethod.Load(id); ok {
			id = cus.(string)
		}
	}
	if strings.Contains(path, ":exc") {
		path = strings.Replace(path, ":exc", id, 1)
		if rec, ok := reconciliationOfException.Load(id); ok {
			id = rec.(string)
		}
	}
	if id == "" && r.madeUp != "" {
		id = r.madeUp
	}
	path = strings.Replace(path, ":id", id, 1)
	if r.query != "" {
		path += "?" + r.query
	}
	if r.body != nil {
		body = r.body(f, id)
	}
	return method, path, body
}

// authzEnv raises every limit: the matrix sends a few thousand requests.
func authzEnv(env map[string]string) {
	paymentsEnv(env)
	env["RATE_LIMIT_LOGIN"] = "100000/1m"
	env["RATE_LIMIT_LOGIN_ACCOUNT"] = "100000/1m"
}

// authzFixture is a merchant with objects of every kind.
type authzFixture struct {
	account
	pk    string // the public key of the key pair it signs with
	email string
	ids   map[string][]string // kind -> ids, oldest first
	next  map[string]int
	idem  map[string]string // route -> the Idempotency-Key the merchant used on it
	// payoutFrom is the connector its payouts are made from.
	payoutFrom string
}

// take returns an object of the kind that no other case has used.
func (f *authzFixture) take(t *testing.T, kind string) string {
	t.Helper()
	i := f.next[kind]
	if i >= len(f.ids[kind]) {
		t.Fatalf("the fixture has only %d objects of kind %s", len(f.ids[kind]), kind)
	}
	f.next[kind]++
	return f.ids[kind][i]
}

// session signs in again: each call that may end a session gets its own.
func (f *authzFixture) session(h *harness) string { return h.login(f.email, matrixPassword) }

// creds returns the credentials of the merchant the route accepts, named.
func (f *authzFixture) creds(h *harness, a accepts) map[string][]string {
	out := map[string][]string{}
	if a == public {
		out["none"] = nil
	}
	if a.key() {
		out["secret key"] = bearer(f.secret)
	}
	if a.session() {
		out["session"] = bearer(f.session(h))
	}
	if a == publicKeyOnly {
		out["public key"] = bearer(f.pk)
	}
	return out
}

// ownCred is one credential the route accepts, the secret key when it can.
func (f *authzFixture) ownCred(h *harness, a accepts) []string {
	switch {
	case a.key():
		return bearer(f.secret)
	case a.session():
		return bearer(f.session(h))
	case a == publicKeyOnly:
		return bearer(f.pk)
	}
	return nil
}

// newAuthzFixture creates a merchant with n objects of every kind: captured
// and authorized charges, refunds, events, endpoints with a failed delivery
// each, and spare API keys. d fails every delivery.
func (h *harness) newAuthzFixture(t *testing.T, email string, w *worker, d *webhooks.Deliverer, n int) *authzFixture {
	t.Helper()
	f := &authzFixture{email: email, ids: map[string][]string{}, next: map[string]int{}, idem: map[string]string{}}
	f.merchantID = h.merchant(email, matrixPassword)
	f.token = h.login(email, matrixPassword)
	f.keyID, f.secret = h.newKey(f.token)
	f.pk = h.publicKeyOf(f.secret)
	for i := 0; i < n; i++ {
		id, _ := h.newKey(f.token)
		f.ids[kindAPIKey] = append(f.ids[kindAPIKey], id)
	}
	// The first object of each created kind is made with an Idempotency-Key,
	// which the other merchant then sends too.
	key := func(route string) []string {
		if _, ok := f.idem[route]; ok {
			return nil
		}
		f.idem[route] = "matrix-" + email + "-" + strings.NewReplacer(" ", "-", "/", "-").Replace(route)
		return []string{"Idempotency-Key", f.idem[route]}
	}
	for i := 0; i < n; i++ {
		id := h.createCharge(t, f.secret, chargeJSON(set("amount", 5000)), key("POST /v1/charges")...).body["id"].(string)
		w.authorize(t, id)
		f.ids[kindCharge] = append(f.ids[kindCharge], id)
		f.ids[kindAuthorized] = append(f.ids[kindAuthorized], h.authorizedCharge(t, w, f.secret, 5000))
	}
	for i := 0; i < n; i++ {
		r := h.with(t).do("POST", "/v1/refunds", refundJSON(f.ids[kindCharge][0], `"amount":10`), append(bearer(f.secret), key("POST /v1/refunds")...)...)
		want(t, r, 201, "")
		f.ids[kindRefund] = append(f.ids[kindRefund], r.body["id"].(string))
	}
	for i := 0; i < n; i++ {
		r := h.with(t).do("POST", "/v1/me/webhook_endpoints", endpointBody("https://hooks.example.com/"+email, "charge.created"),
			append(bearer(f.secret), key("POST /v1/me/webhook_endpoints")...)...)
		want(t, r, 201, "")
		f.ids[kindEndpoint] = append(f.ids[kindEndpoint], obj(r.body["webhook_endpoint"])["id"].(string))
	}
	// One charge.created reaches every endpoint; each delivery fails.
	h.createCharge(t, f.secret, chargeJSON())
	for _, ep := range f.ids[kindEndpoint] {
		dl := h.deliveriesOf(t, ep)
		if len(dl) != 1 {
			t.Fatalf("endpoint %s has %d deliveries, want 1", ep, len(dl))
		}
		deliver(t, d, dl[0].ID)
		f.ids[kindDelivery] = append(f.ids[kindDelivery], dl[0].ID)
	}
	if got := h.deliveriesOf(t, f.ids[kindEndpoint][0]); got[0].Status != "failed" {
		t.Fatalf("delivery %s is %s, want failed", got[0].ID, got[0].Status)
	}
	for _, e := range h.eventsOf(t, f.secret, "") {
		f.ids[kindEvent] = append(f.ids[kindEvent], e["id"].(string))
	}
	h.customersOf(t, f, n, key)
	h.connectorsOf(t, f, n, key)
	h.payoutsOf(t, f, n)
	h.reconciliationsOf(t, f, n, key)
	h.disputesOf(t, f, n)
	for i := 0; i < n; i++ {
		r := h.with(t).do("POST", "/v1/me/members", `{"email":"member-`+strconv.Itoa(i)+`-`+email+`","role":"developer"}`, bearer(f.token)...)
		want(t, r, 201, "")
		f.ids[kindMember] = append(f.ids[kindMember], obj(r.body["member"])["id"].(string))
	}
	return f
}

// connectorsOf gives f n sandbox connectors of its own, besides its
// server-account ones.
func (h *harness) connectorsOf(t *testing.T, f *authzFixture, n int, key func(string) []string) {
	t.Helper()
	for i := 0; i < n; i++ {
		r := h.with(t).do("POST", "/v1/connectors", `{"provider":"sandbox","name":"Connector `+strconv.Itoa(i)+`"}`,
			append(bearer(f.secret), key("POST /v1/connectors")...)...)
		want(t, r, 201, "")
		f.ids[kindConnector] = append(f.ids[kindConnector], r.body["id"].(string))
	}
}

// payoutsOf gives f n payouts made by hand from its server-account sandbox
// connector, of a capture booked for them, as the ledger service makes
// them: they leave nothing more available than before.
func (h *harness) payoutsOf(t *testing.T, f *authzFixture, n int) {
	t.Helper()
	ctx := context.Background()
	if err := h.db.Pool.QueryRow(ctx, `SELECT id FROM connectors WHERE merchant_id = $1 AND provider = 'sandbox' AND server_account`,
		f.merchantID).Scan(&f.payoutFrom); err != nil {
		t.Fatalf("the server-account sandbox connector of %s: %v", f.email, err)
	}
	st := store.New(h.db.Pool)
	a := ledger.Account{MerchantID: f.merchantID, ConnectorID: f.payoutFrom, Currency: "USD"}
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	if _, err := st.Book(ctx, ledger.Captured(a, ids.NewUUID(), "", int64(100*n), ledger.Fee{}, at, at)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		now := time.Now().UTC().Truncate(time.Millisecond)
		var made string
		_, _, err := st.CreatePayout(ctx, nil, a, now, func(int64) (ledger.PayoutPlan, error) {
			p, err := ledger.NewPayoutPlan(a, "sandbox", 100, false, nil, now, time.Hour)
			made = p.Payout.ID
			return p, err
		})
		if err != nil {
			t.Fatal(err)
		}
		f.ids[kindPayout] = append(f.ids[kindPayout], made)
	}
}

// disputesOf gives f n disputes waiting for evidence, each of 1.00 of
// one of its captured charges (which leaves them refundable), written as
// rows: the fixture's events are its charges' and refunds' only.
func (h *harness) disputesOf(t *testing.T, f *authzFixture, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		id := ids.New("dp")
		_, err := h.db.Pool.Exec(context.Background(), `INSERT INTO disputes (id, merchant_id, environment, charge_id, connector_id, provider,
				provider_reference, amount, currency, reason, status, rank, evidence_due_by, created_at, updated_at)
			SELECT $1, merchant_id, environment, id, coalesce(connector_id, ''), provider, $3, 100, currency, 'fraudulent', 'needs_response', 40,
				now() + interval '7 days', now(), now()
			FROM charges WHERE id = $2`, id, f.ids[kindCharge][i%len(f.ids[kindCharge])], "sbx_dp_matrix_"+id)
		if err != nil {
			t.Fatal(err)
		}
		f.ids[kindDispute] = append(f.ids[kindDispute], id)
	}
}

// reconciliationJSON is the body of POST /v1/reconciliations uploading a
// report of one line, reference, of the connector.
func reconciliationJSON(connector, reference string) string {
	return `{"connector":"` + connector + `","report":"` + reconcile.Header + `\n` + reference + `,charge,USD,100,33,67,2026-11-27\n"}`
}

// reconciliationsOf gives f n reconciliations of its first connector,
// each with one exception: a line its books lack.
func (h *harness) reconciliationsOf(t *testing.T, f *authzFixture, n int, key func(string) []string) {
	t.Helper()
	for i := 0; i < n; i++ {
		r := h.with(t).do("POST", "/v1/reconciliations", reconciliationJSON(f.ids[kindConnector][0], "sbx_ch_matrix"+strconv.Itoa(i)),
			append(bearer(f.secret), key("POST /v1/reconciliations")...)...)
		want(t, r, 201, "")
		rec := r.body["id"].(string)
		r = h.with(t).do("GET", "/v1/reconciliations/"+rec+"/exceptions", "", bearer(f.secret)...)
		want(t, r, 200, "")
		exc := obj(r.body["data"].([]any)[0])["id"].(string)
		reconciliationOfException.Store(exc, rec)
		f.ids[kindReconciliation] = append(f.ids[kindReconciliation], rec)
		f.ids[kindException] = append(f.ids[kindException], exc)
	}
}

// routingOf is a routing of f's first two connectors: a rule and a split.
// A fixture without connectors (a request that is refused before its body
// is read) gets ids of no one.
func routingOf(f *authzFixture) string {
	c := append(slices.Clone(f.ids[kindConnector]), "conn_00000000000000000000000000", "conn_00000000000000000000000004")
	return `{"rules":[{"if":{"currency":["eur"],"amount_gte":100},"then":{"connectors":["` + c[1] + `","` + c[0] + `"]}}],` +
		`"default":{"split":[{"connector":"` + c[0] + `","weight":70},{"connector":"` + c[1] + `","weight":30}]}}`
}

// sandboxConnector stores a sandbox connector of the merchant's own,
// enabled, without rehearsal.
func (h *harness) sandboxConnector(t *testing.T, merchantID, name string) string {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	c := connectors.Connector{ID: ids.New(connectors.Prefix), MerchantID: merchantID, Provider: connectors.ProviderSandbox, Name: name,
		Enabled: true, Sandbox: &connectors.Sandbox{}, CreatedAt: now, UpdatedAt: now}
	if _, err := store.New(h.db.Pool).CreateConnector(context.Background(), c, nil, idempotency.Response{}); err != nil {
		t.Fatal(err)
	}
	return c.ID
}

// savedCardJSON is the body of POST /v1/customers/:id/payment_methods with a raw card.
var savedCardJSON = `{"card":{"number":"` + cardVisa + `","exp_month":12,"exp_year":` + strconv.Itoa(expYear) + `,"cvc":"123"}}`

// buyerEmail is the email of the fixture's customers.
func buyerEmail(f *authzFixture) string { return "buyer-" + f.email }

// customersOf gives f n customers and n payment methods, the i-th saved for
// the customer n-1-i, so that no route deletes the customer of a method
// another route uses.
func (h *harness) customersOf(t *testing.T, f *authzFixture, n int, key func(string) []string) {
	t.Helper()
	for i := 0; i < n; i++ {
		r := h.with(t).do("POST", "/v1/customers", `{"email":"`+buyerEmail(f)+`"}`, append(bearer(f.secret), key("POST /v1/customers")...)...)
		want(t, r, 201, "")
		f.ids[kindCustomer] = append(f.ids[kindCustomer], r.body["id"].(string))
	}
	for i := 0; i < n; i++ {
		cus := f.ids[kindCustomer][n-1-i]
		r := h.with(t).do("POST", "/v1/customers/"+cus+"/payment_methods", savedCardJSON,
			append(bearer(f.secret), key("POST /v1/customers/:id/payment_methods")...)...)
		want(t, r, 201, "")
		pm := r.body["id"].(string)
		customerOfMethod.Store(pm, cus)
		f.ids[kindPaymentMethod] = append(f.ids[kindPaymentMethod], pm)
	}
}

// idRoutesOf counts the rows of a matrix that name an object.
func idRoutesOf[R any](rows map[string]R, idKind func(R) string) int {
	n := 0
	for _, r := range rows {
		if idKind(r) != "" {
			n++
		}
	}
	return n
}

// rowsMatchRoutes fails t unless every served route has a row in rows and
// every row a route.
func rowsMatchRoutes[R any](t *testing.T, routes []string, rows map[string]R, table string) {
	t.Helper()
	for _, key := range routes {
		if _, ok := rows[key]; !ok {
			t.Errorf("route %s has no row in %s: say which credentials it takes and how to call it", key, table)
		}
	}
	for key := range rows {
		if !slices.Contains(routes, key) {
			t.Errorf("%s has a row for %s, which the app does not serve", table, key)
		}
	}
}

// matrixMerchants are merchant A, with n objects of every kind, and merchant
// B, with 2, made by a worker with a fake provider and a deliverer whose
// deliveries all fail.
func (h *harness) matrixMerchants(t *testing.T, n int) (a, b *authzFixture) {
	t.Helper()
	w := h.worker(t, &providertest.Fake{})
	d := h.deliverer(t, &recordingSender{status: 500})
	return h.newAuthzFixture(t, "ada@example.com", w, d, n), h.newAuthzFixture(t, "bob@example.com", w, d, 2)
}

// ownedStrings is every id of the merchant in the database, its email and its
// public keys: none of them may appear in another merchant's answers.
func (h *harness) ownedStrings(t *testing.T, merchantID string) []string {
	t.Helper()
	rows, err := h.db.Pool.Query(context.Background(), `
		SELECT id FROM merchants WHERE id = $1 UNION ALL SELECT email FROM merchants WHERE id = $1
		UNION ALL SELECT id FROM sessions WHERE merchant_id = $1
		UNION ALL SELECT id FROM api_keys WHERE merchant_id = $1 UNION ALL SELECT public_key FROM api_keys WHERE merchant_id = $1
		UNION ALL SELECT id::text FROM charges WHERE merchant_id = $1
		UNION ALL SELECT id::text FROM refunds WHERE merchant_id = $1
		UNION ALL SELECT id::text FROM events WHERE merchant_id = $1
		UNION ALL SELECT id FROM webhook_endpoints WHERE merchant_id = $1
		UNION ALL SELECT id::text FROM webhook_deliveries WHERE merchant_id = $1
		UNION ALL SELECT event_id::text FROM webhook_deliveries WHERE merchant_id = $1
		UNION ALL SELECT id FROM customers WHERE merchant_id = $1
		UNION ALL SELECT id FROM payment_methods WHERE merchant_id = $1
		UNION ALL SELECT id FROM connectors WHERE merchant_id = $1
		UNION ALL SELECT id FROM reconciliations WHERE merchant_id = $1
		UNION ALL SELECT id FROM reconciliation_exceptions WHERE merchant_id = $1
		UNION ALL SELECT id FROM members WHERE merchant_id = $1 UNION ALL SELECT email FROM members WHERE merchant_id = $1
		UNION ALL SELECT id FROM payouts WHERE merchant_id = $1 UNION ALL SELECT id FROM balance_transactions WHERE merchant_id = $1
		UNION ALL SELECT id FROM disputes WHERE merchant_id = $1`, merchantID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// stateTables digests what a merchant owns ($1), or every row when $1 is empty.
var stateTables = map[string]string{
	"merchants":          `FROM merchants x WHERE $1 = '' OR id = $1`,
	"sessions":           `FROM sessions x WHERE $1 = '' OR merchant_id = $1`,
	"api_keys":           `FROM api_keys x WHERE $1 = '' OR merchant_id = $1`,
	"charges":            `FROM charges x WHERE $1 = '' OR merchant_id = $1`,
	"refunds":            `FROM refunds x WHERE $1 = '' OR merchant_id = $1`,
	"events":             `FROM events x WHERE $1 = '' OR merchant_id = $1`,
	"idempotency_keys":   `FROM idempotency_keys x WHERE $1 = '' OR merchant_id = $1`,
	"webhook_endpoints":  `FROM webhook_endpoints x WHERE $1 = '' OR merchant_id = $1`,
	"webhook_deliveries": `FROM webhook_deliveries x WHERE $1 = '' OR merchant_id = $1`,
	"webhook_attempts": `FROM webhook_attempts x WHERE $1 = '' OR delivery_id IN
		(SELECT id FROM webhook_deliveries WHERE merchant_id = $1)`,
	"outbox": `FROM outbox x WHERE $1 = '' OR ref_id IN (SELECT id FROM charges WHERE merchant_id = $1
		UNION ALL SELECT id FROM refunds WHERE merchant_id = $1 UNION ALL SELECT id FROM webhook_deliveries WHERE merchant_id = $1)`,
	"sandbox_ledger":       `FROM sandbox_ledger x WHERE $1 = ''`,
	"customers":            `FROM customers x WHERE $1 = '' OR merchant_id = $1`,
	"payment_methods":      `FROM payment_methods x WHERE $1 = '' OR merchant_id = $1`,
	"audit_log":            `FROM audit_log x WHERE $1 = '' OR merchant_id = $1`,
	"card_tokens":          `FROM card_tokens x WHERE $1 = '' OR merchant_id = $1`,
	"connectors":           `FROM connectors x WHERE $1 = '' OR merchant_id = $1`,
	"routing":              `FROM routing x WHERE $1 = '' OR merchant_id = $1`,
	"members":              `FROM members x WHERE $1 = '' OR merchant_id = $1`,
	"payouts":              `FROM payouts x WHERE $1 = '' OR merchant_id = $1`,
	"balance_transactions": `FROM balance_transactions x WHERE $1 = '' OR merchant_id = $1`,
	"disputes":             `FROM disputes x WHERE $1 = '' OR merchant_id = $1`,
	"sandbox_disputes":     `FROM sandbox_disputes x WHERE $1 = ''`,

	"reconciliations":           `FROM reconciliations x WHERE $1 = '' OR merchant_id = $1`,
	"reconciliation_exceptions": `FROM reconciliation_exceptions x WHERE $1 = '' OR merchant_id = $1`,
}

// state digests every table (whole rows, so any column that moves shows).
func (h *harness) state(t *testing.T, merchantID string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for table, from := range stateTables {
		var count int
		var digest string
		err := h.db.Pool.QueryRow(context.Background(),
			`SELECT count(*), md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) `+from, merchantID).Scan(&count, &digest)
		if err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		out[table] = fmt.Sprintf("%d rows %s", count, digest)
	}
	return out
}

func stateDiff(before, after map[string]string) string {
	var out []string
	for table, b := range before {
		if after[table] != b {
			out = append(out, fmt.Sprintf("%s: %s -> %s", table, b, after[table]))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

var requestIDField = regexp.MustCompile(`"request_id":"[^"]*"`)

// withoutRequestID blanks the one field of an error body that differs by request.
func withoutRequestID(raw []byte) string {
	return requestIDField.ReplaceAllString(string(raw), `"request_id":""`)
}

// malformedIDs are ids no object can have, derived from a real one.
func malformedIDs(real string) []string {
	var out []string
	for _, id := range []string{
		"nope", "0", "-1", "null", strings.ToUpper(real), real + "0", real[:len(real)-1], "%7B" + real + "%7D",
		strings.ReplaceAll(real, "-", ""), "%20" + real, real + "%20", "00000000-0000-0000-0000-000000000000",
		"0193a5c2-7f1e-7b3a-9c4d-2e8f6a1b3c5d", "key_0000000000000000000000", "we_0000000000000000000000",
		url.PathEscape("' OR 1=1 --"), "%00", "%C3%A9", strings.Repeat("a", 300),
	} {
		if id != real && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// TestAuthzMatrix is docs/reliability.md A1 over every route the app serves:
// merchant B's credentials on merchant A's ids answer 404 not_found with the
// body of an unknown id and change nothing of A's; no answer to B carries any
// of A's ids; each route takes exactly the credentials its row says (and the
// spec's security says); malformed and foreign-kind ids answer 404.
func TestAuthzMatrix(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv)
	idRoutes := idRoutesOf(authzRoutes, func(r authzRoute) string { return r.idKind })
	a, b := h.matrixMerchants(t, idRoutes)
	doc := loadOpenAPI(t)

	routes := served(h)
	t.Run("every route has a row and every row a route", func(t *testing.T) {
		rowsMatchRoutes(t, routes, authzRoutes, "authzRoutes (authz_test.go)")
		// The spec documents the same credentials.
		for _, key := range routes {
			op := operationOf(t, doc, key)
			if op == nil {
				continue
			}
			got := accepts(0)
			sec := doc.Security
			if op.Security != nil {
				sec = *op.Security
			}
			for _, req := range sec {
				_, s := req["sessionToken"]
				_, k := req["secretKey"]
				if _, p := req["publicKey"]; p {
					got = publicKeyOnly
				}
				switch {
				case s && got == keyOnly, k && got == sessionOnly:
					got = sessionOrKey
				case s:
					got = sessionOnly
				case k:
					got = keyOnly
				}
			}
			if want := authzRoutes[key].auth; want != got {
				t.Errorf("%s: the matrix says %s, api/openapi.yaml says %s", key, want, got)
			}
		}
	})
	if t.Failed() {
		t.FailNow()
	}

	aStrings := h.ownedStrings(t, a.merchantID)
	bStrings := h.ownedStrings(t, b.merchantID)
	// The scan sees a leak: A's own answers carry A's strings.
	if own := h.do("GET", "/v1/charges?limit=100", "", bearer(a.secret)...); !slices.ContainsFunc(aStrings, func(s string) bool {
		return strings.Contains(string(own.raw), s)
	}) {
		t.Fatalf("A's own charge list carries none of A's ids: %s", own.raw)
	}
	var requests, bRequests, leaks int
	// asB sends one request with B's credentials and fails on any of A's strings.
	asB := func(t *testing.T, method, path, body string, headers ...string) response {
		t.Helper()
		requests++
		bRequests++
		r := h.with(t).do(method, path, body, headers...)
		for _, s := range aStrings {
			if strings.Contains(string(r.raw), s) {
				leaks++
				t.Errorf("LEAK: B's %s %s answered %d with A's %s: %s", method, path, r.status, s, r.raw)
			}
		}
		if r.status >= 500 {
			t.Errorf("B's %s %s: %d %s", method, path, r.status, r.raw)
		}
		return r
	}

	// Every id route gets its own object of A.
	idOf := map[string]string{}
	for _, key := range routes {
		if r := authzRoutes[key]; r.idKind != "" {
			idOf[key] = a.take(t, r.idKind)
		}
	}

	t.Run("B on A's objects", func(t *testing.T) {
		before := h.state(t, a.merchantID)
		for _, key := range routes {
			route := authzRoutes[key]
			if route.idKind == "" {
				continue
			}
			// The answer to an id that exists nowhere: B's answer on A's id must be the same.
			unknownID := idOf[key][:len(idOf[key])-6] + "000000"
			if !prefixedKinds[route.idKind] {
				unknownID = uuid.Must(uuid.NewV7()).String()
			}
			m, p, body := route.request(key, b, unknownID)
			unknown := h.with(t).do(m, p, body, b.ownCred(h, route.auth)...)
			want(t, unknown, 404, "not_found")
			for name, cred := range b.creds(h, route.auth) {
				// With A's Idempotency-Keys too: keys are scoped per merchant.
				variants := [][]string{nil}
				for _, k := range a.idem {
					variants = append(variants, []string{"Idempotency-Key", k})
				}
				for _, idem := range variants {
					m, p, body := route.request(key, b, idOf[key])
					r := asB(t, m, p, body, append(slices.Clone(cred), idem...)...)
					if r.status != 404 || r.errCode() != "not_found" {
						leaks++
						t.Errorf("LEAK: %s with B's %s on A's %s %s: %d %s", key, name, route.idKind, idOf[key], r.status, r.raw)
					} else if withoutRequestID(r.raw) != withoutRequestID(unknown.raw) {
						t.Errorf("%s: B on A's id answers %s, on an unknown id %s", key, r.raw, unknown.raw)
					}
				}
			}
		}
		if diff := stateDiff(before, h.state(t, a.merchantID)); diff != "" {
			leaks++
			t.Errorf("LEAK: B's requests changed what A owns: %s", diff)
		}
	})

	t.Run("B names A's connectors in bodies", func(t *testing.T) {
		// The routing and a charge name connectors in their bodies: A's
		// connector is answered as an unknown one (400, the body is at
		// fault), and the answer echoes only the id B sent.
		before := h.state(t, a.merchantID)
		routingBefore := h.do("GET", "/v1/routing", "", bearer(b.secret)...)
		bodies := map[string]func(string) string{
			"PUT /v1/routing default": func(c string) string { return `{"default":{"connectors":["` + c + `"]}}` },
			"PUT /v1/routing split": func(c string) string {
				return `{"rules":[{"if":{},"then":{"split":[{"connector":"` + c + `","weight":1}]}}],"default":{"connectors":["` + b.ids[kindConnector][0] + `"]}}`
			},
			"POST /v1/charges": func(c string) string { return chargeJSON(set("connector", c)) },
		}
		for name, body := range bodies {
			m, p, _ := strings.Cut(name, " ")
			p, _, _ = strings.Cut(p, " ")
			for _, id := range a.ids[kindConnector] {
				unknown := id[:len(id)-6] + "000000"
				u := h.with(t).do(m, p, body(unknown), bearer(b.secret)...)
				want(t, u, 400, "parameter_invalid")
				requests++
				bRequests++
				r := h.with(t).do(m, p, body(id), bearer(b.secret)...)
				if got, w := withoutRequestID(r.raw), strings.ReplaceAll(withoutRequestID(u.raw), unknown, id); got != w {
					leaks++
					t.Errorf("LEAK: %s naming A's connector %s answers %d %s; naming an unknown one, %s", name, id, r.status, r.raw, u.raw)
				}
				rest := strings.ReplaceAll(string(r.raw), id, "")
				for _, s := range aStrings {
					if strings.Contains(rest, s) {
						leaks++
						t.Errorf("LEAK: %s naming A's connector answered with A's %s: %s", name, s, r.raw)
					}
				}
			}
		}
		if after := h.do("GET", "/v1/routing", "", bearer(b.secret)...); string(after.raw) != string(routingBefore.raw) {
			t.Errorf("B's refused routings changed B's routing: %s -> %s", routingBefore.raw, after.raw)
		}
		if diff := stateDiff(before, h.state(t, a.merchantID)); diff != "" {
			leaks++
			t.Errorf("LEAK: B's bodies naming A's connectors changed what A owns: %s", diff)
		}
	})

	listAnswers := map[string]int{}
	t.Run("lists show B only B's objects", func(t *testing.T) {
		before := h.state(t, a.merchantID)
		for _, key := range routes {
			route := authzRoutes[key]
			if route.lists == "" {
				continue
			}
			// A list under one of B's objects (deliveries of B's endpoint).
			ownID := ""
			if route.idKind != "" {
				ownID = b.ids[route.idKind][0]
			}
			queries := []string{"limit=100"}
			for _, id := range a.ids[route.lists][:2] {
				queries = append(queries, "limit=100&starting_after="+id, "limit=100&ending_before="+id)
			}
			if route.filters != nil {
				queries = append(queries, route.filters(a)...)
			}
			for name, cred := range b.creds(h, route.auth) {
				for i, q := range queries {
					m, p, _ := route.request(key, b, ownID)
					r := asB(t, m, p+"?"+q, "", cred...)
					listAnswers[fmt.Sprintf("%d %s", r.status, r.errCode())]++
					if i == 0 {
						want(t, r, 200, "")
						ids := idsOf(r)
						if len(ids) == 0 {
							t.Errorf("B's %s with its %s lists nothing: B owns objects of kind %s", key, name, route.lists)
						}
						for _, id := range ids {
							if !slices.Contains(bStrings, id) {
								t.Errorf("B's %s lists %s, which is not B's", key, id)
							}
						}
					}
				}
			}
		}
		// The filter naming A's charge from B: empty, not A's refunds.
		if diff := stateDiff(before, h.state(t, a.merchantID)); diff != "" {
			t.Errorf("B's lists changed what A owns: %s", diff)
		}
	})

	t.Run("B's own calls never touch A", func(t *testing.T) {
		before := h.state(t, a.merchantID)
		for _, key := range routes {
			route := authzRoutes[key]
			if route.idKind != "" || route.lists != "" || route.stream {
				continue
			}
			for name, cred := range b.creds(h, route.auth) {
				m, p, body := route.request(key, b, "")
				// B sends the Idempotency-Key A used on this route: keys are per merchant.
				headers := slices.Clone(cred)
				if k := a.idem[key]; k != "" {
					headers = append(headers, "Idempotency-Key", k)
				}
				r := asB(t, m, p, body, headers...)
				if r.status != route.ok || r.header.Get("Idempotent-Replayed") != "" {
					t.Errorf("B's %s with its %s: %d (replayed %q) %s, want %d", key, name, r.status, r.header.Get("Idempotent-Replayed"), r.raw, route.ok)
				}
			}
		}
		if diff := stateDiff(before, h.state(t, a.merchantID)); diff != "" {
			leaks++
			t.Errorf("LEAK: B's own requests changed what A owns: %s", diff)
		}
	})

	t.Run("credentials each route takes", func(t *testing.T) {
		// A key and a session that no longer work, and tokens that never did.
		revokedID, revoked := h.newKey(a.token)
		revokedPK := h.publicKeyOf(revoked)
		want(t, h.do("DELETE", "/v1/me/api_keys/"+revokedID, "", bearer(a.secret)...), 200, "")
		loggedOut := a.session(h)
		want(t, h.do("DELETE", "/v1/auth/logout", "", bearer(loggedOut)...), 204, "")
		pk := h.do("GET", "/v1/me/api_keys?limit=1", "", bearer(a.secret)...).body["data"].([]any)[0].(map[string]any)["public_key"].(string)
		forged := signed(t, jwt.MapClaims{"iss": "gatehouse", "aud": "gatehouse-dashboard", "sub": a.merchantID, "jti": "ses_forged",
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}, jwt.SigningMethodHS256, "not-the-server-secret-but-32-bytes-long")
		before := h.state(t, a.merchantID)
		var undocumented []string
		for _, key := range routes {
			route := authzRoutes[key]
			if route.auth == public {
				continue
			}
			id := ""
			if route.idKind != "" {
				id = a.ids[route.idKind][len(a.ids[route.idKind])-1]
			}
			type probe struct {
				name    string
				headers []string
				status  int
				code    string
			}
			probes := []probe{
				{"no Authorization", nil, 401, "missing_authorization"},
				{"Basic scheme", []string{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte(a.secret+":"))}, 401, "invalid_token"},
				{"live secret key", bearer("sk_live_" + strings.TrimPrefix(a.secret, "sk_test_")), 403, "live_mode_disabled"},
				{"forged session", bearer(forged), 401, "invalid_token"},
			}
			if route.auth == publicKeyOnly {
				probes = append(probes,
					probe{"revoked key pair's public key", bearer(revokedPK), 401, "token_revoked"},
					probe{"unknown public key", bearer("pk_test_" + strings.Repeat("0", 24)), 401, "invalid_token"},
					probe{"live public key", bearer("pk_live_" + strings.TrimPrefix(pk, "pk_test_")), 403, "live_mode_disabled"})
			} else {
				probes = append(probes, probe{"public key", bearer(pk), 401, "invalid_token_type"})
			}
			if route.auth.key() {
				probes = append(probes,
					probe{"revoked key", bearer(revoked), 401, "token_revoked"},
					probe{"unknown key", bearer("sk_test_" + strings.Repeat("0", 32)), 401, "invalid_token"})
			} else {
				probes = append(probes, probe{"secret key", bearer(a.secret), 401, "invalid_token_type"})
			}
			if route.auth.session() {
				probes = append(probes, probe{"logged-out session", bearer(loggedOut), 401, "token_revoked"})
			} else {
				probes = append(probes, probe{"session", bearer(a.token), 401, "invalid_token_type"})
			}
			for _, p := range probes {
				m, path, body := route.request(key, a, id)
				requests++
				if p.status == 403 && !documents(operationOf(t, doc, key), "403") {
					// The contract refuses sk_live_ keys everywhere, so every
					// authenticated operation must document its 403.
					undocumented = append(undocumented, key+" 403")
				}
				r := h.with(t).do(m, path, body, p.headers...)
				if r.status != p.status || r.errCode() != p.code {
					t.Errorf("%s with %s: %d %s, want %d %s", key, p.name, r.status, r.raw, p.status, p.code)
				}
			}
		}
		if diff := stateDiff(before, h.state(t, a.merchantID)); diff != "" {
			t.Errorf("refused credentials changed what A owns: %s", diff)
		}
		if len(undocumented) > 0 {
			t.Errorf("answers missing from api/openapi.yaml: %s", strings.Join(undocumented, ", "))
		}
	})

	t.Run("malformed ids and ids of another kind", func(t *testing.T) {
		before := h.state(t, a.merchantID)
		for _, key := range routes {
			route := authzRoutes[key]
			if route.idKind == "" {
				continue
			}
			bad := malformedIDs(idOf[key])
			for kind, ids := range a.ids {
				if tableOf[kind] != tableOf[route.idKind] {
					bad = append(bad, ids[0])
				}
			}
			for _, id := range bad {
				m, p, body := route.request(key, a, id)
				requests++
				cred := bearer(a.token) // one session for all: signing in adds sessions
				if route.auth != sessionOnly {
					cred = a.ownCred(h, route.auth)
				}
				r := h.with(t).do(m, p, body, cred...)
				if r.status != 404 || r.errCode() != "not_found" {
					t.Errorf("%s with id %q: %d %s, want 404 not_found", key, id, r.status, r.raw)
				}
			}
		}
		after := h.state(t, a.merchantID)
		delete(before, "sessions") // A signs in for its session-only routes
		delete(after, "sessions")
		if diff := stateDiff(before, after); diff != "" {
			t.Errorf("malformed ids changed what A owns: %s", diff)
		}
	})

	// Last: A reaches each of its objects, so the 404s above are about ownership.
	t.Run("A on its own objects", func(t *testing.T) {
		for _, key := range routes {
			route := authzRoutes[key]
			if route.idKind == "" {
				continue
			}
			m, p, body := route.request(key, a, idOf[key])
			requests++
			r := h.with(t).do(m, p, body, a.ownCred(h, route.auth)...)
			if r.status != route.ok {
				t.Errorf("%s by A on its own %s: %d %s, want %d", key, route.idKind, r.status, r.raw, route.ok)
			}
		}
	})

	t.Logf("authz matrix: %d routes (%d with an id, %d lists), %d requests (%d with B's credentials, every answer scanned for %d strings of A), BOLA leaks %d",
		len(routes), idRoutes, countLists(), requests, bRequests, len(aStrings), leaks)
	t.Logf("B's list answers (A's cursors and filters included): %v", listAnswers)
	if leaks != 0 {
		t.Errorf("BOLA leaks: %d, want 0", leaks)
	}
}

// documents reports whether the operation lists the status among its answers.
func documents(op *openapi3.Operation, status string) bool {
	return op != nil && op.Responses.Value(status) != nil
}

// unchecked sends a request without checking the answer against the spec.
func (h *harness) unchecked(t *testing.T, method, path, body string, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, h.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func countLists() int {
	n := 0
	for _, r := range authzRoutes {
		if r.lists != "" {
			n++
		}
	}
	return n
}

// loadOpenAPI parses api/openapi.yaml.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	return testenv.LoadSpec(t).Doc()
}

// operationOf finds the spec's operation for "METHOD /path/:id".
func operationOf(t *testing.T, doc *openapi3.T, route string) *openapi3.Operation {
	t.Helper()
	method, path, _ := strings.Cut(route, " ")
	path = regexp.MustCompile(`:(\w+)`).ReplaceAllString(path, "{$1}")
	item := doc.Paths.Value(path)
	if item == nil || item.GetOperation(method) == nil {
		t.Errorf("%s is not in api/openapi.yaml", route)
		return nil
	}
	return item.GetOperation(method)
}

// propertiesOf merges a schema's properties with those of its allOf, oneOf
// and anyOf branches.
func propertiesOf(s *openapi3.Schema) map[string]*openapi3.Schema {
	out := map[string]*openapi3.Schema{}
	if s == nil {
		return out
	}
	for _, branches := range []openapi3.SchemaRefs{s.AllOf, s.OneOf, s.AnyOf} {
		for _, b := range branches {
			for k, v := range propertiesOf(b.Value) {
				out[k] = v
			}
		}
	}
	for k, v := range s.Properties {
		out[k] = v.Value
	}
	return out
}

// readOnlyField is a response field that the request does not take.
type readOnlyField struct {
	path   []string
	schema *openapi3.Schema
}

func (f readOnlyField) String() string { return strings.Join(f.path, ".") }

// readOnlyFields is the response's properties minus the request's, recursing
// into objects both have (card.brand), and reading the properties of a
// resource the response wraps (webhook_endpoint.id as id).
func readOnlyFields(req, resp *openapi3.Schema, prefix []string) []readOnlyField {
	reqProps := propertiesOf(req)
	var out []readOnlyField
	seen := map[string]bool{}
	add := func(f readOnlyField) {
		if !seen[f.String()] {
			seen[f.String()] = true
			out = append(out, f)
		}
	}
	respProps := propertiesOf(resp)
	names := make([]string, 0, len(respProps))
	for k := range respProps {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		s := respProps[name]
		path := append(slices.Clone(prefix), name)
		if r, ok := reqProps[name]; ok {
			if len(propertiesOf(r)) > 0 && len(propertiesOf(s)) > 0 {
				for _, f := range readOnlyFields(r, s, path) {
					add(f)
				}
			}
			continue
		}
		add(readOnlyField{path: path, schema: s})
		if len(prefix) == 0 {
			inner := propertiesOf(s)
			if _, isResource := inner["id"]; isResource {
				for _, f := range readOnlyFields(req, s, nil) {
					add(f)
				}
			}
		}
	}
	return out
}

// sampleOf is a plausible value for a field of the schema.
func sampleOf(s *openapi3.Schema) any {
	if s == nil {
		return "x"
	}
	if len(s.Enum) > 0 && s.Enum[0] != nil {
		return s.Enum[0]
	}
	for _, branches := range []openapi3.SchemaRefs{s.AllOf, s.OneOf, s.AnyOf} {
		for _, b := range branches {
			if v := sampleOf(b.Value); v != "x" {
				return v
			}
		}
	}
	switch {
	case s.Type == nil:
	case s.Type.Includes("integer"), s.Type.Includes("number"):
		return 1
	case s.Type.Includes("boolean"):
		return true
	case s.Type.Includes("array"):
		return []any{}
	case s.Type.Includes("object"):
		return map[string]any{}
	case s.Format == "date-time":
		return "2026-01-01T00:00:00.000Z"
	}
	return "x"
}

// successSchema is the schema of the operation's 2xx JSON answer.
func successSchema(op *openapi3.Operation) *openapi3.Schema {
	for code, r := range op.Responses.Map() {
		if !strings.HasPrefix(code, "2") || r.Value == nil {
			continue
		}
		if mt := r.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
			return mt.Schema.Value
		}
	}
	return nil
}

// TestReadOnlyFields is docs/reliability.md A4: for every route that takes a body,
// each field of its answer that its request does not take (generated from
// api/openapi.yaml) is refused with 400 parameter_invalid naming the field,
// and nothing in the database changes.
func TestReadOnlyFields(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv)
	w := h.worker(t, &providertest.Fake{})
	d := h.deliverer(t, &recordingSender{status: 500})
	a := h.newAuthzFixture(t, "ada@example.com", w, d, 4)
	doc := loadOpenAPI(t)

	var routesRun, cases int
	var ignored []string
	for _, key := range served(h) {
		method, _, _ := strings.Cut(key, " ")
		route, ok := authzRoutes[key]
		if !ok || (method != fiber.MethodPost && method != fiber.MethodPatch && method != fiber.MethodPut) || isChallengePath(strings.Fields(key)[1]) {
			continue
		}
		if strings.HasPrefix(strings.Fields(key)[1], "/v1/provider_notifications/") {
			continue // the provider's own document, checked by its signature first
		}
		op := operationOf(t, doc, key)
		if op == nil {
			continue
		}
		var req *openapi3.Schema
		if op.RequestBody != nil && op.RequestBody.Value != nil {
			if mt := op.RequestBody.Value.Content.Get("application/json"); mt != nil && mt.Schema != nil {
				req = mt.Schema.Value
			}
		}
		resp := successSchema(op)
		if resp == nil {
			t.Errorf("%s: no JSON answer in the spec", key)
			continue
		}
		fields := readOnlyFields(req, resp, nil)
		if len(fields) == 0 {
			t.Errorf("%s: no read-only fields found: the generator is broken", key)
			continue
		}
		id := ""
		if route.idKind != "" {
			id = a.take(t, route.idKind)
		}
		routesRun++
		t.Logf("%s: read-only %v", key, fields)
		t.Run(key, func(t *testing.T) {
			m, p, base := route.request(key, a, id)
			if base == "" {
				base = "{}"
			}
			with := func(fields ...readOnlyField) []byte {
				var body map[string]any
				if err := json.Unmarshal([]byte(base), &body); err != nil {
					t.Fatal(err)
				}
				for _, f := range fields {
					at := body
					for _, k := range f.path[:len(f.path)-1] {
						next, ok := at[k].(map[string]any)
						if !ok {
							next = map[string]any{}
							at[k] = next
						}
						at = next
					}
					at[f.path[len(f.path)-1]] = sampleOf(f.schema)
				}
				raw, _ := json.Marshal(body)
				return raw
			}
			if bodyIgnored[key] {
				raw := with(fields...)
				cases++
				r := h.with(t).do(m, p, string(raw), a.ownCred(h, route.auth)...)
				if r.status == 400 {
					t.Fatalf("%s now refuses a body (%s): remove it from bodyIgnored so that it is held to 400 per field", key, r.raw)
				}
				if r.status != route.ok {
					t.Errorf("a body sent to %s (which reads none): %d %s, want %d as without a body", key, r.status, r.raw, route.ok)
				}
				for _, f := range fields {
					if v, ok := r.body[f.String()]; ok && sampleOf(f.schema) == "x" && v == "x" {
						t.Errorf("%s took %s from the body: %s", key, f, r.raw)
					}
				}
				ignored = append(ignored, key)
				return
			}
			for _, f := range fields {
				raw := with(f)
				cred := a.ownCred(h, route.auth)
				before := h.state(t, "")
				cases++
				r := h.with(t).do(m, p, string(raw), cred...)
				if r.status != 400 || r.errCode() != "parameter_invalid" || r.errField("param") != f.String() {
					t.Errorf("read-only %s: %d param %q %s, want 400 parameter_invalid param %s\nbody sent: %s",
						f, r.status, r.errField("param"), r.raw, f, raw)
				}
				if diff := stateDiff(before, h.state(t, "")); diff != "" {
					t.Errorf("read-only %s changed the database: %s", f, diff)
				}
			}
		})
	}
	t.Logf("read-only fields: %d routes, %d cases; bodies ignored (not refused) by %s", routesRun, cases, strings.Join(ignored, ", "))
}

// bodyIgnored would list routes that take no body and ignore one sent
// (held to the weaker promise that a body changes nothing); every route
// refuses unknown fields today.
var bodyIgnored = map[string]bool{}

// TestJWTAttacksEveryRoute extends TestJWTAttacks (docs/reliability.md A2) to
// every route that takes a session, adds algorithms and claims it does not
// try, and covers tokens of a merchant that no longer exists.
func TestJWTAttacksEveryRoute(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv)
	a := h.account("ada@example.com")
	now := time.Now()
	parts := strings.Split(a.token, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var real jwt.MapClaims
	if err := json.Unmarshal(payload, &real); err != nil {
		t.Fatal(err)
	}
	with := func(mods map[string]any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for k, v := range real {
			c[k] = v
		}
		for k, v := range mods {
			if v == nil {
				delete(c, k)
			} else {
				c[k] = v
			}
		}
		return c
	}
	hs := func(c jwt.MapClaims) string { return signed(t, c, jwt.SigningMethodHS256, testJWTSecret) }
	raw := func(header string, c jwt.MapClaims, sig string) string {
		p, _ := json.Marshal(c)
		return base64.RawURLEncoding.EncodeToString([]byte(header)) + "." + base64.RawURLEncoding.EncodeToString(p) + "." + sig
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	asym := func(m jwt.SigningMethod, key any) string {
		s, err := jwt.NewWithClaims(m, real).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// A merchant whose row is gone (its sessions and keys go with it).
	gone := h.account("gone@example.com")
	want(t, h.do("GET", "/v1/me", "", bearer(gone.token)...), 200, "")
	if _, err := h.db.Pool.Exec(context.Background(), `DELETE FROM merchants WHERE id = $1`, gone.merchantID); err != nil {
		t.Fatal(err)
	}
	goneClaims := with(map[string]any{"sub": gone.merchantID})

	attacks := map[string]string{
		"alg none":                     raw(`{"alg":"none","typ":"JWT"}`, real, ""),
		"alg None":                     raw(`{"alg":"None","typ":"JWT"}`, real, ""),
		"alg NONE with old sig":        raw(`{"alg":"NONE","typ":"JWT"}`, real, parts[2]),
		"HS384":                        signed(t, real, jwt.SigningMethodHS384, testJWTSecret),
		"HS512":                        signed(t, real, jwt.SigningMethodHS512, testJWTSecret),
		"RS256":                        asym(jwt.SigningMethodRS256, rsaKey),
		"PS256":                        asym(jwt.SigningMethodPS256, rsaKey),
		"ES256":                        asym(jwt.SigningMethodES256, ecKey),
		"wrong secret":                 signed(t, real, jwt.SigningMethodHS256, "another-secret-that-is-long-enough!!"),
		"empty signature":              parts[0] + "." + parts[1] + ".",
		"tampered sub":                 parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), a.merchantID, gone.merchantID, 1))) + "." + parts[2],
		"expired":                      hs(with(map[string]any{"exp": now.Add(-time.Minute).Unix()})),
		"no exp":                       hs(with(map[string]any{"exp": nil})),
		"no iat":                       hs(with(map[string]any{"iat": nil})),
		"iat in the future":            hs(with(map[string]any{"iat": now.Add(time.Hour).Unix()})),
		"nbf in the future":            hs(with(map[string]any{"nbf": now.Add(time.Hour).Unix()})),
		"no sub":                       hs(with(map[string]any{"sub": nil})),
		"no jti":                       hs(with(map[string]any{"jti": nil})),
		"wrong issuer":                 hs(with(map[string]any{"iss": "evil"})),
		"no issuer":                    hs(with(map[string]any{"iss": nil})),
		"wrong audience":               hs(with(map[string]any{"aud": "other"})),
		"no audience":                  hs(with(map[string]any{"aud": nil})),
		"unknown session":              hs(with(map[string]any{"jti": "ses_unknown"})),
		"unknown merchant":             hs(with(map[string]any{"sub": "mer_00000000000000000000000000", "jti": "ses_00000000000000000000000000"})),
		"deleted merchant":             hs(goneClaims),
		"deleted merchant's own token": gone.token,
	}
	// Tokens that the server itself could have signed: only their state is wrong.
	wellSigned := map[string]bool{"unknown session": true, "unknown merchant": true, "deleted merchant": true, "deleted merchant's own token": true}
	if r := h.do("GET", "/v1/me", "", bearer(hs(real))...); r.status != 200 {
		t.Fatalf("a re-signed copy of the real token is refused: %s", r.raw)
	}
	// The cache may still hold the deleted merchant's session: Postgres is the truth.
	if err := h.rdb.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	runs := 0
	for _, key := range served(h) {
		route := authzRoutes[key]
		if route.auth == public {
			continue
		}
		for name, token := range attacks {
			m, p, body := route.request(key, &authzFixture{email: "ada@example.com"}, "0193a5c2-7f1e-7b3a-9c4d-2e8f6a1b3c5d")
			runs++
			code := "invalid_token"
			if wellSigned[name] && !route.auth.session() {
				// A route for keys only checks the signature, then refuses sessions.
				code = "invalid_token_type"
			}
			r := h.do(m, p, body, bearer(token)...)
			if r.status != 401 || r.errCode() != code {
				t.Errorf("%s with %s: %d %s, want 401 %s", key, name, r.status, r.raw, code)
			}
		}
		if route.auth.key() {
			m, p, body := route.request(key, &authzFixture{email: "ada@example.com"}, "0193a5c2-7f1e-7b3a-9c4d-2e8f6a1b3c5d")
			runs++
			if r := h.do(m, p, body, bearer(gone.secret)...); r.status != 401 {
				t.Errorf("%s with the deleted merchant's key: %d %s, want 401", key, r.status, r.raw)
			}
		}
	}
	want(t, h.do("GET", "/v1/me", "", bearer(a.token)...), 200, "")
	t.Logf("JWT attacks: %d tokens on every authenticated route, %d requests", len(attacks), runs)
}

// TestLoginTiming is docs/reliability.md A3: an unknown email and a wrong password
// get the same status and the same body (but for request_id), and cost the
// same work. The work is measured as CPU time of this process (server and
// client run in it), which the load of other processes blurs less than wall
// time; wall-clock times are reported.
//
// The promise is a median difference under 5 ms for a login of about 20 ms.
// Under -race a login costs about ten times the CPU, and on a loaded 2-core
// machine the CPU of the same work varies by a few per cent (caches, the
// other core's load), so the bound here scales with the measured cost: the
// median difference must stay under a tenth of the median login, or 5 ms,
// whichever is more. A path that skips the hash differs by nearly all of it.
func TestLoginTiming(t *testing.T) {
	// Not parallel: it measures the process's CPU time, which other tests would add to.
	h := newHarness(t, authzEnv)
	h.merchant("ada@example.com", matrixPassword)
	const rounds = 51
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	type sample struct{ wall, cpu time.Duration }
	attempt := func(email string) (sample, response) {
		body := `{"email":"` + email + `","password":"wrong password!"}`
		req, err := http.NewRequest("POST", h.base+"/v1/auth/login", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		// Each attempt starts from a collected heap and runs without the
		// collector, so that no attempt pays for garbage of another.
		runtime.GC()
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		start, startCPU := time.Now(), cpu()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := io.ReadAll(resp.Body)
		took := sample{wall: time.Since(start), cpu: cpu() - startCPU}
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		h.spec.Check(t, req, resp, raw)
		r := response{status: resp.StatusCode, header: resp.Header, raw: raw}
		_ = json.Unmarshal(raw, &r.body)
		return took, r
	}
	// Warm up both paths (connections, caches, the hasher's memory).
	attempt("ada@example.com")
	attempt("warmup@example.com")

	// Each round times one attempt of each kind back to back, in alternating
	// order, and keeps their difference.
	var wrong, unknown []sample
	var wallDiff, cpuDiff []time.Duration
	var first string
	for i := 0; i < rounds; i++ {
		order := []string{"ada@example.com", fmt.Sprintf("nobody%d@example.com", i)}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		var sw, su sample
		for _, email := range order {
			took, r := attempt(email)
			want(t, r, 401, "invalid_credentials")
			if first == "" {
				first = withoutRequestID(r.raw)
			} else if got := withoutRequestID(r.raw); got != first {
				t.Errorf("login body for %s differs: %s vs %s", email, got, first)
			}
			if email == "ada@example.com" {
				sw = took
			} else {
				su = took
			}
		}
		wrong, unknown = append(wrong, sw), append(unknown, su)
		wallDiff, cpuDiff = append(wallDiff, sw.wall-su.wall), append(cpuDiff, sw.cpu-su.cpu)
	}
	median := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	of := func(ss []sample, f func(sample) time.Duration) []time.Duration {
		out := make([]time.Duration, len(ss))
		for i, s := range ss {
			out[i] = f(s)
		}
		return out
	}
	wallOf := func(s sample) time.Duration { return s.wall }
	cpuOf := func(s sample) time.Duration { return s.cpu }
	t.Logf("login, %d rounds: wall-clock median wrong password %v, unknown email %v, median difference %v",
		rounds, median(of(wrong, wallOf)), median(of(unknown, wallOf)), median(wallDiff))
	t.Logf("login, %d rounds: CPU median wrong password %v, unknown email %v, median difference %v",
		rounds, median(of(wrong, cpuOf)), median(of(unknown, cpuOf)), median(cpuDiff))
	bound := max(5*time.Millisecond, median(of(append(slices.Clone(wrong), unknown...), cpuOf))/10)
	if d := median(cpuDiff); d >= bound || d <= -bound {
		t.Errorf("a wrong password and an unknown email differ by %v of CPU in median, want less than %v", d, bound)
	}
}
