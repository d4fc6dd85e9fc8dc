package httpapi_test

// The dashboard (api/openapi.yaml) at the HTTP level: its own
// authorization matrix (docs/reliability.md A1 for the cookie session: every
// /dashboard route the app serves has a row), CSRF, framing, the cookie,
// hostile forms, and lists of more than a thousand charges.

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
	"github.com/gatehouse-pay/gatehouse/internal/reconcile"
	"github.com/gatehouse-pay/gatehouse/internal/store"
)

// dashClient is a browser-like client of the dashboard: a cookie jar, no
// redirects followed, and the CSRF token of the last page it saw.
type dashClient struct {
	t    *testing.T
	base string
	c    *http.Client
	csrf string
}

type dashPage struct {
	status   int
	header   http.Header
	body     string
	location string
}

var csrfInput = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

func (h *harness) dashClient(t *testing.T) *dashClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &dashClient{t: t, base: h.base, c: &http.Client{Jar: jar, Timeout: 15 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// send sends a request; headers are name, value pairs.
func (d *dashClient) send(method, path string, form url.Values, headers ...string) dashPage {
	d.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
		headers = append([]string{"Content-Type", "application/x-www-form-urlencoded"}, headers...)
	}
	return d.sendBody(method, path, body, headers...)
}

// sendBody sends a request with a body of its own, its Content-Type among
// the headers.
func (d *dashClient) sendBody(method, path string, body io.Reader, headers ...string) dashPage {
	d.t.Helper()
	req, err := http.NewRequest(method, d.base+path, body)
	if err != nil {
		d.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := d.c.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatal(err)
	}
	p := dashPage{status: resp.StatusCode, header: resp.Header, body: string(raw), location: resp.Header.Get("Location")}
	if m := csrfInput.FindStringSubmatch(p.body); m != nil {
		d.csrf = m[1]
	}
	if resp.StatusCode >= 500 {
		d.t.Errorf("%s %s: %d\n%.500s", method, path, resp.StatusCode, raw)
	}
	return p
}

func (d *dashClient) get(path string, headers ...string) dashPage {
	d.t.Helper()
	return d.send(http.MethodGet, path, nil, headers...)
}

// post sends a form with the client's CSRF token and a fresh idempotency key.
func (d *dashClient) post(path string, form url.Values, headers ...string) dashPage {
	d.t.Helper()
	f := url.Values{"csrf_token": {d.csrf}, "idempotency_key": {ids.NewUUID()}}
	for k, v := range form {
		f[k] = v
	}
	return d.send(http.MethodPost, path, f, headers...)
}

// signIn signs in through the sign-in form and keeps the session cookie.
func (d *dashClient) signIn(email, password string) {
	d.t.Helper()
	if p := d.get("/dashboard/login"); p.status != 200 {
		d.t.Fatalf("GET /dashboard/login: %d", p.status)
	}
	p := d.send(http.MethodPost, "/dashboard/login", url.Values{"csrf_token": {d.csrf}, "email": {email}, "password": {password}})
	if p.status != http.StatusSeeOther || p.location != "/dashboard/charges" {
		d.t.Fatalf("sign in as %s: %d to %q\n%.800s", email, p.status, p.location, p.body)
	}
	if p := d.get("/dashboard/charges"); p.status != 200 {
		d.t.Fatalf("the charges page after signing in: %d", p.status)
	}
}

// cookie is the client's session cookie value.
func (d *dashClient) cookie() string {
	u, _ := url.Parse(d.base + "/dashboard/")
	for _, c := range d.c.Jar.Cookies(u) {
		if c.Name == "gatehouse_session" {
			return c.Value
		}
	}
	return ""
}

// with is another client carrying only the given session cookie value.
func (d *dashClient) withCookie(h *harness, value string) *dashClient {
	n := h.dashClient(d.t)
	u, _ := url.Parse(d.base + "/dashboard/")
	n.c.Jar.SetCookies(u, []*http.Cookie{{Name: "gatehouse_session", Value: value, Path: "/dashboard"}})
	n.csrf = d.csrf
	return n
}

// dashRoute is one row of the dashboard's matrix.
type dashRoute struct {
	// public routes need no session; the others redirect (pages) or refuse
	// (forms) without one.
	public bool
	idKind string // the kind of object named by :id
	lists  string // the kind of objects the page lists
	form   url.Values
	// formOf, when set, is the owner's form (it names the owner's objects).
	formOf func(a *authzFixture) url.Values
	ok     int // the owner's status
	// matrixForm is what TestRoleMatrix posts, an empty form when nil: a
	// form every role the route allows may send.
	matrixForm url.Values
}

// dashRoutes is the matrix, keyed "METHOD /path" as dashboard.go spells it.
var dashRoutes = map[string]dashRoute{
	"GET /dashboard":                {ok: 303},
	"GET /dashboard/login":          {public: true, ok: 200},
	"POST /dashboard/login":         {public: true},
	"POST /dashboard/login/mfa":     {public: true},
	"GET /dashboard/security":       {ok: 200},
	"POST /dashboard/security/totp": {ok: 200},
	// A malformed code re-renders the page (TestDashboardTwoFactor confirms).
	"POST /dashboard/security/totp/confirm": {ok: 400, form: url.Values{"code": {"x"}}},
	"POST /dashboard/team/settings":         {ok: 303},
	"POST /dashboard/logout":                {ok: 303},
	"GET /dashboard/assets/dashboard.css":   {public: true, ok: 200},
	"GET /dashboard/assets/dashboard.js":    {public: true, ok: 200},
	"GET /dashboard/assets/favicon.svg":     {public: true, ok: 200},

	"GET /dashboard/setup":  {public: true, ok: 200},
	"POST /dashboard/setup": {public: true},
	"GET /dashboard/team":   {ok: 200, lists: kindMember},
	"POST /dashboard/team": {ok: 200, formOf: func(*authzFixture) url.Values {
		return url.Values{"email": {"dash-" + uuid.NewString() + "@example.com"}, "role": {"viewer"}}
	}},
	"POST /dashboard/team/:id/role":       {ok: 303, idKind: kindMember, form: url.Values{"role": {"support"}}},
	"POST /dashboard/team/:id/remove":     {ok: 303, idKind: kindMember},
	"GET /dashboard/keys":                 {ok: 200, lists: kindAPIKey},
	"POST /dashboard/keys":                {ok: 200, form: url.Values{"name": {"dash"}, "type": {"restricted"}}, matrixForm: url.Values{"type": {"restricted"}}},
	"POST /dashboard/keys/:id/revoke":     {ok: 303, idKind: kindAPIKey},
	"POST /dashboard/keys/:id/roll":       {ok: 200, idKind: kindAPIKey, form: url.Values{"expires_in": {"60"}}},
	"GET /dashboard/charges":              {ok: 200, lists: kindCharge},
	"GET /dashboard/charges/:id":          {ok: 200, idKind: kindCharge},
	"POST /dashboard/charges/:id/capture": {ok: 303, idKind: kindAuthorized, form: url.Values{"amount": {"1.00"}}},
	"POST /dashboard/charges/:id/void":    {ok: 303, idKind: kindAuthorized},
	"POST /dashboard/charges/:id/refund":  {ok: 303, idKind: kindCharge, form: url.Values{"amount": {"0.10"}}},
	"GET /dashboard/events":               {ok: 200, lists: kindEvent},
	"GET /dashboard/events/:id":           {ok: 200, idKind: kindEvent},
	"GET /dashboard/webhooks":             {ok: 200, lists: kindEndpoint},
	"POST /dashboard/webhooks": {ok: 200, form: url.Values{"url": {"https://hooks.example.com/dash"},
		"events": {"charge.captured", "refund.succeeded"}}},
	"GET /dashboard/webhooks/:id": {ok: 200, idKind: kindEndpoint},
	"POST /dashboard/webhooks/:id": {ok: 303, idKind: kindEndpoint, form: url.Values{"url": {"https://hooks.example.com/edited"},
		"events": {"charge.created"}, "active": {"on"}}},
	"POST /dashboard/webhooks/:id/rotate":  {ok: 200, idKind: kindEndpoint},
	"POST /dashboard/webhooks/:id/test":    {ok: 303, idKind: kindEndpoint},
	"POST /dashboard/webhooks/:id/recover": {ok: 200, idKind: kindEndpoint, form: url.Values{"since": {"2020-01-01T00:00"}, "dry_run": {"true"}}},
	"POST /dashboard/webhooks/:id/delete":  {ok: 303, idKind: kindEndpoint},
	"POST /dashboard/deliveries/:id/retry": {ok: 303, idKind: kindDelivery},

	"GET /dashboard/balance":     {ok: 200},
	"GET /dashboard/payouts":     {ok: 200, lists: kindPayout},
	"GET /dashboard/payouts/:id": {ok: 200, idKind: kindPayout},
	// The fixtures' payouts took what was available: more is refused, on
	// the page (TestDashboardPayouts pays out).
	"POST /dashboard/payouts": {ok: 409, formOf: func(a *authzFixture) url.Values {
		return url.Values{"account": {a.payoutFrom + "/USD"}, "amount": {"1.00"}}
	}},
	"GET /dashboard/reconciliations":     {ok: 200, lists: kindReconciliation},
	"GET /dashboard/reconciliations/:id": {ok: 200, idKind: kindReconciliation},
	// An upload of a line the books lack (TestDashboardReconciliation
	// reconciles by day, uploads files and resolves).
	"POST /dashboard/reconciliations": {ok: 303, formOf: func(a *authzFixture) url.Values {
		return url.Values{"source": {"upload"}, "connector": {a.ids[kindConnector][0]},
			"report": {reconcile.Header + "\nsbx_ch_dashboard,charge,USD,100,33,67,2026-11-27\n"}}
	}},
	// The route names the exception's reconciliation too (dashRoutePath).
	"POST /dashboard/reconciliations/:id/exceptions/:exc/resolve": {ok: 303, idKind: kindException,
		form: url.Values{"action": {"accept"}, "note": {"dashboard"}}},
	"GET /dashboard/disputes":     {ok: 200, lists: kindDispute},
	"GET /dashboard/disputes/:id": {ok: 200, idKind: kindDispute},
	// Staging evidence (TestDashboardDisputeEvidence submits it, role by
	// role); accepting a dispute.
	"POST /dashboard/disputes/:id":       {ok: 303, idKind: kindDispute, form: url.Values{"action": {"save"}, "evidence.customer_name": {"Matrix"}}},
	"POST /dashboard/disputes/:id/close": {ok: 303, idKind: kindDispute},

	"GET /dashboard/customers":             {ok: 200, lists: kindCustomer},
	"GET /dashboard/customers/:id":         {ok: 200, idKind: kindCustomer},
	"POST /dashboard/customers/:id/delete": {ok: 303, idKind: kindCustomer},
	// The route names the method's customer too (dashRoutePath).
	"POST /dashboard/customers/:id/payment_methods/:pm_id/delete": {ok: 303, idKind: kindPaymentMethod},

	"GET /dashboard/connectors":                {ok: 200, lists: kindConnector},
	"POST /dashboard/connectors":               {ok: 303, form: url.Values{"provider": {"sandbox"}, "name": {"Dash"}, "enabled": {"on"}}},
	"GET /dashboard/connectors/:id":            {ok: 200, idKind: kindConnector},
	"POST /dashboard/connectors/:id/enabled":   {ok: 303, idKind: kindConnector, form: url.Values{"enabled": {"false"}}},
	"POST /dashboard/connectors/:id/rehearsal": {ok: 303, idKind: kindConnector, form: url.Values{"latency_ms": {"5"}}},
	"POST /dashboard/connectors/:id/delete":    {ok: 303, idKind: kindConnector},
	"GET /dashboard/routing":                   {ok: 200},
	"GET /dashboard/audit":                     {ok: 200},
	"POST /dashboard/routing": {ok: 303, formOf: func(a *authzFixture) url.Values {
		return url.Values{"form": {"ordered"}, "connector": {a.ids[kindConnector][0]}}
	}},
}

// dashboardServed lists the app's /dashboard routes as "METHOD /path".
func dashboardServed(h *harness) []string {
	seen := map[string]bool{}
	for _, r := range h.app.GetRoutes(true) {
		if r.Method != http.MethodHead && isDashboardPath(r.Path) {
			seen[r.Method+" "+r.Path] = true
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func isDashboardPath(p string) bool { return p == "/dashboard" || strings.HasPrefix(p, "/dashboard/") }

// isChallengePath reports whether p is a page of the cardholder's challenge
// (HTML forms, not JSON).
func isChallengePath(p string) bool { return strings.HasPrefix(p, "/authenticate/") }

var requestIDText = regexp.MustCompile(`Request id [0-9a-f-]+`)

// TestDashboardAuthz is A1 for the dashboard: the session cookie is the only
// credential (no cookie, a bearer token, a signed-out or forged cookie: a
// page redirects to sign in, a form is refused 401); merchant B's cookie on
// A's ids answers exactly as for an unknown id and changes nothing of A's;
// B's lists show none of A's objects; a form without the session's CSRF
// token, or from another site, is refused 403 and changes nothing.
func TestDashboardAuthz(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv)
	a, b := h.matrixMerchants(t, idRoutesOf(dashRoutes, func(r dashRoute) string { return r.idKind }))
	routes := dashboardServed(h)

	t.Run("every route has a row and every row a route", func(t *testing.T) {
		rowsMatchRoutes(t, routes, dashRoutes, "dashRoutes (dashboard_test.go)")
	})
	if t.Failed() {
		t.FailNow()
	}
	aStrings := h.ownedStrings(t, a.merchantID)
	bd := h.dashClient(t)
	bd.signIn(b.email, matrixPassword)
	path := dashRoutePath
	asB := func(t *testing.T, method, p string, form url.Values) dashPage {
		t.Helper()
		var r dashPage
		if method == http.MethodGet {
			r = bd.get(p)
		} else {
			r = bd.post(p, form)
		}
		for _, s := range aStrings {
			if strings.Contains(r.body, s) {
				t.Errorf("LEAK: B's %s %s answered %d with A's %s", method, p, r.status, s)
			}
		}
		return r
	}

	t.Run("B on A's objects", func(t *testing.T) {
		before := h.state(t, a.merchantID)
		for _, key := range routes {
			route := dashRoutes[key]
			if route.idKind == "" {
				continue
			}
			id := a.take(t, route.idKind)
			unknownID := id[:len(id)-6] + "000000"
			if !prefixedKinds[route.idKind] {
				unknownID = ids.NewUUID()
			}
			m, p := path(key, unknownID)
			unknown := asB(t, m, p, route.form)
			if unknown.status != 404 || !strings.Contains(unknown.body, "not_found") {
				t.Errorf("%s on an unknown id: %d\n%.500s", key, unknown.status, unknown.body)
			}
			m, p = path(key, id)
			r := asB(t, m, p, route.form)
			if r.status != 404 {
				t.Errorf("LEAK: %s with B's cookie on A's %s %s: %d", key, route.idKind, id, r.status)
			} else if requestIDText.ReplaceAllString(strings.ReplaceAll(r.body, id, unknownID), "") != requestIDText.ReplaceAllString(unknown.body, "") {
				t.Errorf("%s: B on A's id answers unlike an unknown id", key)
			}
		}
		if diff := stateDiff(before, h.state(t, a.merchantID)); diff != "" {
			t.Errorf("LEAK: B's requests changed what A owns: %s", diff)
		}
	})

	t.Run("lists show B only B's objects", func(t *testing.T) {
		for _, key := range routes {
			route := dashRoutes[key]
			if route.lists == "" {
				continue
			}
			m, p := path(key, "")
			queries := []string{""}
			for _, id := range a.ids[route.lists][:2] {
				queries = append(queries, "?starting_after="+url.QueryEscape(id), "?ending_before="+url.QueryEscape(id))
			}
			for i, q := range queries {
				r := asB(t, m, p+q, nil)
				if r.status != 200 {
					t.Errorf("B's %s%s: %d", key, q, r.status)
				}
				if i == 0 && !strings.Contains(r.body, b.ids[route.lists][0]) {
					t.Errorf("B's %s does not list B's %s", key, b.ids[route.lists][0])
				}
			}
		}
	})

	t.Run("the owner's calls", func(t *testing.T) {
		ad := h.dashClient(t)
		ad.signIn(a.email, matrixPassword)
		for _, key := range routes {
			route := dashRoutes[key]
			if route.ok == 0 || key == "POST /dashboard/logout" {
				continue
			}
			id := ""
			if route.idKind != "" {
				id = a.take(t, route.idKind)
			}
			m, p := path(key, id)
			form := route.form
			if route.formOf != nil {
				form = route.formOf(a)
			}
			var r dashPage
			if m == http.MethodGet {
				r = ad.get(p)
			} else {
				r = ad.post(p, form)
			}
			if r.status != route.ok {
				t.Errorf("A's %s: %d, want %d\n%.600s", key, r.status, route.ok, r.body)
			}
			if strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
				checkDashboardHeaders(t, key, r)
			}
		}
	})

	t.Run("the cookie is the only credential", func(t *testing.T) {
		ad := h.dashClient(t)
		ad.signIn(a.email, matrixPassword)
		signedOut := h.dashClient(t)
		signedOut.signIn(a.email, matrixPassword)
		old := signedOut.cookie()
		if r := signedOut.post("/dashboard/logout", nil); r.status != 303 || r.location != "/dashboard/login?notice=signed_out" {
			t.Fatalf("sign out: %d to %q", r.status, r.location)
		}
		forged := signed(t, jwt.MapClaims{"iss": "gatehouse", "aud": "gatehouse-dashboard", "sub": a.merchantID, "jti": "ses_forged",
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Hour).Unix()}, jwt.SigningMethodHS256, "not-the-server-secret-but-32-bytes-long")
		callers := map[string]*dashClient{
			"no credentials":        h.dashClient(t),
			"the signed-out cookie": ad.withCookie(h, old),
			"a forged cookie":       ad.withCookie(h, forged),
			"garbage in the cookie": ad.withCookie(h, "x.y.z"),
		}
		before := h.state(t, a.merchantID)
		for _, key := range routes {
			route := dashRoutes[key]
			if route.public {
				continue
			}
			id := ""
			if route.idKind != "" {
				id = a.ids[route.idKind][len(a.ids[route.idKind])-1]
			}
			m, p := path(key, id)
			for name, c := range callers {
				for _, headers := range [][]string{nil, {"Authorization", "Bearer " + a.secret}, {"Authorization", "Bearer " + a.token}} {
					var r dashPage
					if m == http.MethodGet {
						r = c.get(p, headers...)
					} else {
						c.csrf = ad.csrf // even with the session's real token
						r = c.post(p, route.form, headers...)
					}
					switch {
					case m == http.MethodGet && (r.status != 303 || r.location != "/dashboard/login"):
						t.Errorf("%s with %s (%v): %d to %q, want 303 to /dashboard/login", key, name, headers, r.status, r.location)
					case m == http.MethodPost && r.status != 401:
						t.Errorf("%s with %s (%v): %d, want 401", key, name, headers, r.status)
					}
					for _, s := range aStrings {
						if strings.Contains(r.body, s) {
							t.Errorf("LEAK: %s with %s answered with A's %s", key, name, s)
						}
					}
				}
			}
		}
		if diff := stateDiff(before, h.state(t, a.merchantID)); diff != "" {
			t.Errorf("requests without a live session changed what A owns: %s", diff)
		}
	})

	t.Run("CSRF", func(t *testing.T) {
		ad := h.dashClient(t)
		ad.signIn(a.email, matrixPassword)
		own := ad.csrf
		otherSession := h.dashClientSignedIn(t, a.email).csrf
		before := h.state(t, a.merchantID)
		for _, key := range routes {
			route := dashRoutes[key]
			m, p := path(key, "")
			if m != http.MethodPost || route.public {
				continue
			}
			if route.idKind != "" {
				_, p = path(key, a.ids[route.idKind][len(a.ids[route.idKind])-2])
			}
			for _, tc := range []struct {
				name    string
				token   string
				headers []string
			}{
				{"no token", "", nil},
				{"B's token", bd.csrf, nil},
				{"a token of another session of A's", otherSession, nil},
				{"a cross-site request with the right token", own, []string{"Sec-Fetch-Site", "cross-site"}},
				{"a same-site request from another origin", own, []string{"Sec-Fetch-Site", "same-site"}},
				{"another Origin with the right token", own, []string{"Origin", "http://evil.example"}},
			} {
				ad.csrf = tc.token
				r := ad.post(p, route.form, tc.headers...)
				if r.status != 403 || !strings.Contains(r.body, "csrf_token_invalid") {
					t.Errorf("%s, %s: %d, want 403 csrf_token_invalid", key, tc.name, r.status)
				}
			}
		}
		ad.csrf = own
		if diff := stateDiff(before, h.state(t, a.merchantID)); diff != "" {
			t.Errorf("refused forms changed what A owns: %s", diff)
		}
		// The sign-in form has its own token, bound to a nonce cookie.
		fresh := h.dashClient(t)
		fresh.get("/dashboard/login")
		for _, tc := range []struct {
			name  string
			token string
		}{{"no token", ""}, {"another browser's token", bd.csrf}} {
			r := fresh.send(http.MethodPost, "/dashboard/login", url.Values{"csrf_token": {tc.token}, "email": {a.email}, "password": {matrixPassword}})
			if r.status != 403 || fresh.cookie() != "" {
				t.Errorf("sign in with %s: %d, cookie %v", tc.name, r.status, fresh.cookie() != "")
			}
		}
	})
}

// dashRoutePath is the method and path of a row's key for an object id. A
// route that names a payment method names its customer (as :id) too: the
// method's own, or for an id of no fixture's method the id itself; one
// that names an exception names its reconciliation so.
func dashRoutePath(key, id string) (string, string) {
	m, p, _ := strings.Cut(key, " ")
	if strings.Contains(p, ":pm_id") {
		p = strings.Replace(p, ":pm_id", id, 1)
		if cus, ok := customerOfMethod.Load(id); ok {
			id = cus.(string)
		}
	}
	if strings.Contains(p, ":exc") {
		p = strings.Replace(p, ":exc", id, 1)
		if rec, ok := reconciliationOfException.Load(id); ok {
			id = rec.(string)
		}
	}
	return m, strings.Replace(p, ":id", id, 1)
}

func (h *harness) dashClientSignedIn(t *testing.T, email string) *dashClient {
	t.Helper()
	d := h.dashClient(t)
	d.signIn(email, matrixPassword)
	return d
}

// checkDashboardHeaders: never framed, never cached, no inline script.
func checkDashboardHeaders(t *testing.T, what string, r dashPage) {
	t.Helper()
	csp := r.header.Get("Content-Security-Policy")
	for _, want := range []string{"frame-ancestors 'none'", "script-src 'self'", "default-src 'none'", "form-action 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("%s: Content-Security-Policy %q lacks %s", what, csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("%s: Content-Security-Policy %q allows inline script", what, csp)
	}
	if r.header.Get("X-Frame-Options") != "DENY" || r.header.Get("Cache-Control") != "no-store" || r.header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("%s: X-Frame-Options %q, Cache-Control %q, X-Content-Type-Options %q", what,
			r.header.Get("X-Frame-Options"), r.header.Get("Cache-Control"), r.header.Get("X-Content-Type-Options"))
	}
	if regexp.MustCompile(`<script(?:\s[^>]*)?>[^<]`).MatchString(r.body) || regexp.MustCompile(`\son[a-z]+=`).MatchString(r.body) {
		t.Errorf("%s: the page has inline script", what)
	}
}

// TestDashboardSession: the cookie's attributes (Secure behind a trusted TLS
// proxy), the sign-in limits shared with the API, and a wrong password shown
// on the form.
func TestDashboardSession(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(env map[string]string) {
		env["RATE_LIMIT_LOGIN"] = "5/1m"
		env["TRUSTED_PROXIES"] = "127.0.0.0/8"
	})
	h.merchant("cy@example.com", "correct horse battery")

	d := h.dashClient(t)
	d.get("/dashboard/login")
	r := d.send(http.MethodPost, "/dashboard/login", url.Values{"csrf_token": {d.csrf}, "email": {"cy@example.com"}, "password": {"correct horse battery"}},
		"X-Forwarded-Proto", "https")
	var session *http.Cookie
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == "gatehouse_session" {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || !session.Secure || session.SameSite != http.SameSiteStrictMode || session.Path != "/dashboard" ||
		time.Until(session.Expires) < 23*time.Hour || time.Until(session.Expires) > 25*time.Hour {
		t.Fatalf("session cookie behind a TLS proxy: %+v", session)
	}

	// A wrong password: the form again, with the API's message, 401.
	d = h.dashClient(t)
	d.get("/dashboard/login")
	r = d.send(http.MethodPost, "/dashboard/login", url.Values{"csrf_token": {d.csrf}, "email": {"cy@example.com"}, "password": {"wrong"}})
	if r.status != 401 || !strings.Contains(r.body, `id="login"`) || !strings.Contains(r.body, "role=\"alert\"") || d.cookie() != "" {
		t.Errorf("wrong password: %d\n%.600s", r.status, r.body)
	}
	// The login limit counts the dashboard's sign-ins like the API's.
	statuses := []int{}
	for range 6 {
		d.get("/dashboard/login")
		r = d.send(http.MethodPost, "/dashboard/login", url.Values{"csrf_token": {d.csrf}, "email": {"cy@example.com"}, "password": {"wrong"}})
		statuses = append(statuses, r.status)
	}
	if statuses[len(statuses)-1] != 429 || r.header.Get("Retry-After") == "" || !strings.Contains(r.body, "rate_limited") {
		t.Errorf("sign-in attempts answered %v; the last one %.300s", statuses, r.body)
	}
	if got := h.do("POST", "/v1/auth/login", `{"email":"cy@example.com","password":"correct horse battery"}`); got.status != 429 {
		t.Errorf("the API's login after the dashboard's attempts: %d, want 429 (one limit)", got.status)
	}
}

// TestDashboardAtScale: a merchant with more than a thousand charges pages
// through every one of them, forwards and back, with and without filters,
// each page a bounded query.
func TestDashboardAtScale(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("dee@example.com")
	seed := h.createCharge(t, a.secret, chargeJSON()).body["id"].(string)
	const n = 1200
	newIDs := make([]string, n)
	for i := range newIDs {
		newIDs[i] = ids.NewUUID()
	}
	ctx := context.Background()
	var cols string
	if err := h.db.Pool.QueryRow(ctx, `SELECT string_agg(column_name, ', ' ORDER BY ordinal_position) FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'charges' AND column_name <> 'id'`).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	if _, err := h.db.Pool.Exec(ctx, `INSERT INTO charges (id, `+cols+`) SELECT u, `+cols+` FROM charges, unnest($2::uuid[]) u WHERE id = $1`, seed, newIDs); err != nil {
		t.Fatal(err)
	}
	// A third failed, the rest captured; created over the last ten days.
	if _, err := h.db.Pool.Exec(ctx, `UPDATE charges SET status = CASE WHEN x.i % 3 = 0 THEN 'failed' ELSE 'captured' END,
		created_at = now() - (x.i % 10) * interval '1 day' FROM unnest($1::uuid[]) WITH ORDINALITY x(id, i) WHERE charges.id = x.id`, newIDs); err != nil {
		t.Fatal(err)
	}
	d := h.dashClient(t)
	d.signIn("dee@example.com", "correct horse battery")
	row := regexp.MustCompile(`<tr data-charge="([0-9a-f-]+)">`)
	next := regexp.MustCompile(`href="(/dashboard/charges\?[^"]*starting_after=[^"]*)"`)
	prev := regexp.MustCompile(`href="(/dashboard/charges\?[^"]*ending_before=[^"]*)"`)
	walk := func(start string, link *regexp.Regexp) ([]string, int, string) {
		var seen []string
		pages := 0
		p := start
		last := ""
		for p != "" {
			r := d.get(strings.ReplaceAll(p, "&amp;", "&"))
			if r.status != 200 {
				t.Fatalf("GET %s: %d\n%.500s", p, r.status, r.body)
			}
			pages++
			for _, m := range row.FindAllStringSubmatch(r.body, -1) {
				seen = append(seen, m[1])
			}
			last = p
			p = ""
			if m := link.FindStringSubmatch(r.body); m != nil {
				p = m[1]
			}
			if pages > 200 {
				t.Fatal("more than 200 pages")
			}
		}
		return seen, pages, last
	}
	for _, tc := range []struct {
		query string
		where string
	}{
		{"", `TRUE`},
		{"status=failed", `status = 'failed'`},
		{"status=captured&from=" + time.Now().UTC().AddDate(0, 0, -4).Format("2006-01-02"), `status = 'captured' AND created_at >= (now() at time zone 'UTC')::date - 4`},
	} {
		var want []string
		rows, err := h.db.Pool.Query(ctx, `SELECT id::text FROM charges WHERE merchant_id = $1 AND `+tc.where+` ORDER BY id DESC`, a.merchantID)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			want = append(want, id)
		}
		rows.Close()
		start := "/dashboard/charges"
		if tc.query != "" {
			start += "?" + tc.query
		}
		forward, pages, last := walk(start, next)
		if !slices.Equal(forward, want) {
			t.Errorf("%q forwards: %d charges over %d pages, want the %d in the database, newest first", tc.query, len(forward), pages, len(want))
		}
		// Back from the last page to the first, through the "Newer" links.
		// Back from the last page to the first, through the "Newer" links:
		// every charge once.
		back, _, _ := walk(last, prev)
		slices.Sort(back)
		sorted := slices.Sorted(slices.Values(want))
		if !slices.Equal(back, sorted) {
			t.Errorf("%q backwards: %d charges, want the %d in the database", tc.query, len(back), len(want))
		}
		t.Logf("%q: %d charges in %d pages of 25", tc.query, len(want), pages)
		if tc.query == "" && len(want) <= 1000 {
			t.Fatalf("only %d charges", len(want))
		}
	}
	// A bad filter is a 400 page, not a 500.
	for _, q := range []string{"from=yesterday", "to=2026-13-01", "starting_after=nope", "starting_after=" + seed + "&ending_before=" + seed} {
		if r := d.get("/dashboard/charges?" + q); r.status != 400 || !strings.Contains(r.body, "parameter_invalid") {
			t.Errorf("GET /dashboard/charges?%s: %d", q, r.status)
		}
	}
}

// TestDashboardHostileForms: spoiled forms on every dashboard action are
// refused with a 4xx page that says what was wrong, and change nothing.
func TestDashboardHostileForms(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv)
	w := h.worker(t, &providertest.Fake{})
	d := h.deliverer(t, &recordingSender{status: 500})
	a := h.newAuthzFixture(t, "eve@example.com", w, d, 1)
	ad := h.dashClientSignedIn(t, a.email)
	charge, authorized, endpoint := a.ids[kindCharge][0], a.ids[kindAuthorized][0], a.ids[kindEndpoint][0]
	long := strings.Repeat("x", 70<<10)
	cases := []struct {
		path string
		form url.Values
	}{
		{"/dashboard/charges/" + charge + "/refund", url.Values{"amount": {"abc"}}},
		{"/dashboard/charges/" + charge + "/refund", url.Values{"amount": {"-1"}}},
		{"/dashboard/charges/" + charge + "/refund", url.Values{"amount": {"0.001"}}},
		{"/dashboard/charges/" + charge + "/refund", url.Values{"amount": {"1e9"}}},
		{"/dashboard/charges/" + charge + "/refund", url.Values{"amount": {"99999999999999999999"}}},
		{"/dashboard/charges/" + charge + "/refund", url.Values{"amount": {"0"}}},
		{"/dashboard/charges/" + charge + "/refund", url.Values{"amount": {"5000.00"}}}, // more than is left
		{"/dashboard/charges/" + charge + "/refund", url.Values{"amount": {"1.00"}, "reason": {"because"}}},
		{"/dashboard/charges/" + charge + "/refund", url.Values{"amount": {"1.00"}, "idempotency_key": {"not-a-uuid"}}},
		{"/dashboard/charges/" + authorized + "/capture", url.Values{"amount": {"1,00"}}},
		{"/dashboard/charges/" + authorized + "/capture", url.Values{"amount": {"999.00"}}}, // above the authorization
		{"/dashboard/charges/" + charge + "/void", nil},                                     // captured: invalid state
		{"/dashboard/webhooks", url.Values{"url": {"not a url"}, "events": {"charge.created"}}},
		{"/dashboard/webhooks", url.Values{"url": {"https://hooks.example.com/x"}}},
		{"/dashboard/webhooks", url.Values{"url": {"https://hooks.example.com/x"}, "events": {"charge.exploded"}}},
		{"/dashboard/webhooks", url.Values{"url": {"https://hooks.example.com/" + long}, "events": {"charge.created"}}},
		{"/dashboard/webhooks/" + endpoint, url.Values{"url": {"https://hooks.example.com/x"}}},
		{"/dashboard/webhooks/" + endpoint, url.Values{"url": {"ftp://hooks.example.com/x"}, "events": {"charge.created"}}},
		{"/dashboard/webhooks/" + endpoint + "/recover", url.Values{"since": {"yesterday"}}},
		{"/dashboard/webhooks/" + endpoint + "/recover", nil},
		{"/dashboard/keys", url.Values{"name": {strings.Repeat("k", 500)}}},
	}
	for _, tc := range cases {
		before := h.state(t, a.merchantID)
		r := ad.post(tc.path, tc.form)
		if r.status < 400 || r.status >= 500 || !strings.Contains(r.body, `role="alert"`) {
			t.Errorf("POST %s %v: %d\n%.400s", tc.path, tc.form, r.status, r.body)
		}
		if diff := stateDiff(before, h.state(t, a.merchantID)); diff != "" {
			t.Errorf("POST %s %v changed: %s", tc.path, tc.form, diff)
		}
	}
	// Bodies that are not forms at all: JSON, binary, oversized.
	before := h.state(t, a.merchantID)
	for _, tc := range []struct {
		name, contentType, body string
		status                  int
	}{
		{"JSON", "application/json", `{"csrf_token":"` + ad.csrf + `","amount":"1.00"}`, 403},
		{"binary", "application/octet-stream", "\x00\x01\xff\xfe", 403},
		{"a form over 64 KiB", "application/x-www-form-urlencoded", "csrf_token=" + ad.csrf + "&amount=" + long, 413},
	} {
		req, _ := http.NewRequest(http.MethodPost, h.base+"/dashboard/charges/"+charge+"/refund", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", tc.contentType)
		resp, err := ad.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
	}
	if diff := stateDiff(before, h.state(t, a.merchantID)); diff != "" {
		t.Errorf("non-form bodies changed: %s", diff)
	}
}

// TestDashboardChargePage: a charge's page lists its own events, its refunds'
// events included, and no other charge's; the lookup can use its index.
func TestDashboardChargePage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	w := h.worker(t, &providertest.Fake{})
	a := h.account("flo@example.com")
	one, other := h.capturedCharge(t, w, a.secret, 3000), h.capturedCharge(t, w, a.secret, 4000)
	r := h.do("POST", "/v1/refunds", refundJSON(one, `"amount":1000`), bearer(a.secret)...)
	want(t, r, 201, "")
	w.refund(t, r.body["id"].(string))

	d := h.dashClientSignedIn(t, "flo@example.com")
	page := d.get("/dashboard/charges/" + one)
	if page.status != 200 {
		t.Fatalf("charge page: %d", page.status)
	}
	types := regexp.MustCompile(`<tr data-event-type="([a-z._]+)">`).FindAllStringSubmatch(page.body, -1)
	var got []string
	for _, m := range types {
		got = append(got, m[1])
	}
	if want := []string{"refund.succeeded", "refund.created", "charge.captured", "charge.created"}; !slices.Equal(got, want) {
		t.Errorf("the charge's events on its page: %v, want %v", got, want)
	}
	for _, e := range h.eventsOf(t, a.secret, "") {
		if obj(obj(e["data"])["charge"])["id"] == other && strings.Contains(page.body, e["id"].(string)) {
			t.Errorf("the page of %s lists event %s of %s", one, e["id"], other)
		}
	}
	if !strings.Contains(page.body, "10.00 USD") || !strings.Contains(page.body, `id="refund"`) {
		t.Errorf("the page does not show the refund of 10.00 USD and the refund form for the rest")
	}

	// An event an earlier release wrote without its charge is missing from
	// the page until the fill (api migrate, the retention prune) sets it.
	ctx := context.Background()
	if _, err := h.db.Pool.Exec(ctx, `UPDATE events SET charge_id = NULL WHERE charge_id = $1 AND type = 'refund.created'`, one); err != nil {
		t.Fatal(err)
	}
	if p := d.get("/dashboard/charges/" + one); strings.Contains(p.body, `data-event-type="refund.created"`) {
		t.Fatal("an event without charge_id is listed: the page does not read charge_id")
	}
	if n, err := store.New(h.db.Pool).FillEventCharges(ctx); err != nil || n != 1 {
		t.Fatalf("FillEventCharges: %d, %v; want 1", n, err)
	}
	if p := d.get("/dashboard/charges/" + one); !strings.Contains(p.body, `data-event-type="refund.created"`) {
		t.Error("the filled event is not listed")
	}

	// The query can use events_merchant_charge_idx (the table is too small
	// for the planner to choose it unprompted).
	tx, err := h.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	rows, err := tx.Query(ctx, `EXPLAIN SELECT id FROM events WHERE merchant_id = $1 AND charge_id = $2::uuid ORDER BY id DESC LIMIT 101`, a.merchantID, one)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	// events is partitioned: the index of each partition is a partition of
	// events_merchant_charge_idx.
	var names []string
	if err := tx.QueryRow(ctx, `SELECT array_agg(inhrelid::regclass::text) FROM pg_inherits
		WHERE inhparent = 'events_merchant_charge_idx'::regclass`).Scan(&names); err != nil {
		t.Fatal(err)
	}
	used := false
	for _, name := range names {
		used = used || strings.Contains(plan.String(), name+" ")
	}
	if !used {
		t.Errorf("the charge's events are not found through events_merchant_charge_idx (%v):\n%s", names, plan.String())
	}
}
