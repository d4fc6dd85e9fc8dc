package httpapi

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/money"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// The merchant dashboard (api/openapi.yaml): server-rendered pages
// under /dashboard, same origin as the API, signed in with the same session
// as POST /v1/auth/login and acting through the same services as the API.
//
// The session token lives in an HttpOnly, SameSite=Strict cookie (Secure over
// TLS) scoped to /dashboard. Every form that changes something carries a CSRF
// token bound to the session (an HMAC of its id, so any replica checks it);
// the sign-in form carries one bound to a nonce cookie. A request a browser
// marks as cross-site or same-site-but-cross-origin is refused before that.
// Pages are never framed (frame-ancestors 'none', X-Frame-Options: DENY),
// never cached, and run no inline script.
//
//go:embed dashboard/*.html dashboard/dashboard.css dashboard/dashboard.js dashboard/favicon.svg
var dashboardFiles embed.FS

const (
	dashboardPath = "/dashboard"
	sessionCookie = "gatehouse_session"
	loginCookie   = "gatehouse_login"
	csrfField     = "csrf_token"
	idemField     = "idempotency_key"
	// dashboardPageSize is the rows of a dashboard list page.
	dashboardPageSize = 25
)

// dashboardCSP allows the dashboard's own script and style and nothing else:
// no inline script or style, no framing by anyone, forms only to itself.
// Images may be data: URIs (the Security page's QR code, drawn on the
// server).
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

var (
	errCSRF = &apperr.Error{Kind: apperr.KindForbidden, Code: apperr.CodeCSRF,
		Message: "This form did not come from your dashboard (its security token is missing or wrong). Reload the page and try again."}
	errCrossSite = &apperr.Error{Kind: apperr.KindForbidden, Code: apperr.CodeCSRF,
		Message: "Requests from other sites are refused. Use the dashboard's own pages."}
	errSignedOut = apperr.Unauthenticated(apperr.CodeInvalidToken, "Your session has ended. Sign in again.")
)

// dashboard holds the parsed pages and the static assets.
type dashboard struct {
	pages map[string]*template.Template
}

var dashboardFuncs = template.FuncMap{
	"money":  money.Format,
	"major":  money.Major,
	"newKey": ids.NewUUID,
	// Keys: their permissions for people, whether a rolled key's time is
	// up, and the choices of how long a rolled key keeps working.
	"keyPerms":     keyPermissions,
	"keyExpired":   func(k apikeys.Key) bool { return k.Expired(time.Now()) },
	"rollOverlaps": func() any { return rollOverlaps },
	"when":         func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	// day is a date (UTC); px a coordinate of a chart.
	"day": func(t time.Time) string { return t.UTC().Format(time.DateOnly) },
	"px":  func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	// stamp is a time for a table whose heading says UTC.
	"stamp": func(t time.Time) string { return t.UTC().Format(time.DateTime) },
	"whenp": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"str": func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	},
	"num": func(p *int) string {
		if p == nil {
			return ""
		}
		return strconv.Itoa(*p)
	},
	// auth is a charge's authentication status, not_required when unset.
	"auth": func(a charges.Authentication) string {
		if a.Status == "" {
			return charges.AuthNotRequired
		}
		return a.Status
	},
	// row is a charge's row in a list, with or without its customer.
	"row": func(ch charges.Charge, withCustomer bool) chargeRow {
		return chargeRow{Charge: ch, WithCustomer: withCustomer}
	},
	// ms is a duration in milliseconds, — for none.
	"ms": msOf,
	// route is a routing's route with the merchant's connectors by id.
	"route": newRouteOf,
	"share": share,
	// kind names a reconciliation exception's kind; signed is an amount
	// with its sign, for a difference.
	"kind":   func(k string) string { return exceptionKinds[k] },
	"signed": signedMoney,
	// reason names a dispute's reason; thousands writes a count with
	// thousands separators.
	"reason":    disputeReason,
	"thousands": thousands,
	// fieldOf is a field of the evidence form with its page.
	"fieldOf": func(v disputeView, f evidenceField) evidenceInput { return evidenceInput{View: v, Field: f} },
	"has": func(list []string, v string) bool {
		for _, x := range list {
			if x == v {
				return true
			}
		}
		return false
	},
}

// chargeRow is a charge's row in a list of charges.
type chargeRow struct {
	Charge       charges.Charge
	WithCustomer bool
}

func newDashboard() *dashboard {
	d := &dashboard{pages: map[string]*template.Template{}}
	for _, name := range []string{"login", "error", "keys", "charges", "charge", "customers", "customer", "events", "event", "webhooks", "webhook",
		"connectors", "connector", "routing", "team", "setup", "audit", "security", "login_mfa",
		"balance", "payouts", "payout", "reconciliations", "reconciliation", "disputes", "dispute"} {
		d.pages[name] = template.Must(template.New(name).Funcs(dashboardFuncs).
			ParseFS(dashboardFiles, "dashboard/layout.html", "dashboard/"+name+".html"))
	}
	return d
}

// view is what every page gets.
type view struct {
	Title    string
	Nav      string
	Merchant *resource.Merchant
	CSRF     string
	// Role is the signed-in member's, for what a page offers (Can).
	Role      string
	Notice    string
	Error     string
	ErrorCode string
	RequestID string
	// Busy marks a page that shows work still under way (a charge the
	// worker has not finished, a pending delivery): it reloads itself.
	Busy bool
	// Back is where a failure page leads.
	Back string
	// Canonical is the page's own address when it answers a form posted to
	// another one; the script puts it in the history.
	Canonical string
	Data      any
}

// dashboardHeaders are the headers of every dashboard page.
func dashboardHeaders(c *fiber.Ctx) {
	c.Set(fiber.HeaderContentSecurityPolicy, dashboardCSP)
	c.Set(fiber.HeaderXFrameOptions, "DENY")
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderReferrerPolicy, "same-origin")
	c.Set(fiber.HeaderCacheControl, "no-store")
	c.Set("Cross-Origin-Opener-Policy", "same-origin")
}

// render writes the named page.
func (s *server) render(c *fiber.Ctx, status int, name string, v view) error {
	t, ok := s.dash.pages[name]
	if !ok {
		return apperr.Internal(fmt.Errorf("dashboard: no page %q", name))
	}
	v.RequestID = requestID(c)
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, "layout", v); err != nil {
		return apperr.Internal(err)
	}
	dashboardHeaders(c)
	c.Set(fiber.HeaderContentType, fiber.MIMETextHTMLCharsetUTF8)
	return c.Status(status).Send(b.Bytes())
}

// page renders a signed-in page with the merchant, the CSRF token and the
// notice named in the query.
func (s *server) page(c *fiber.Ctx, name, nav, title string, data any) error {
	v, err := s.signedIn(c, nav, title)
	if err != nil {
		return err
	}
	v.Data = data
	return s.render(c, fiber.StatusOK, name, v)
}

// signedIn is the common part of a signed-in page's view.
func (s *server) signedIn(c *fiber.Ctx, nav, title string) (view, error) {
	p := principal(c)
	m, err := s.Merchants.Get(c.UserContext(), p.MerchantID)
	if err != nil {
		return view{}, err
	}
	pm := PresentMerchant(m)
	return view{Title: title, Nav: nav, Merchant: &pm, CSRF: s.csrfToken(p.SessionID), Role: p.Role, Notice: notices[c.Query("notice")]}, nil
}

// Can reports whether the signed-in member's role grants access ("read"
// or "write") to resource: pages offer only what the member may do (the
// authorization table refuses the rest anyway).
func (v view) Can(resource, access string) bool {
	a, _ := authz.ParseAccess(access)
	return authz.RolePermissions(v.Role).Allows(authz.Resource(resource), a)
}

// moneyPages are the pages of the navigation's Money section, which
// lists them again under the header.
var moneyPages = map[string]bool{"balance": true, "payouts": true, "reconciliations": true, "disputes": true}

// InMoney reports whether the page is one of the Money section's: the
// balance, the payouts, reconciliation and the disputes.
func (v view) InMoney() bool { return moneyPages[v.Nav] }

// MoneyHome is where the navigation's Money link leads: the Balance page,
// or the Disputes page for a member who reads disputes but not the
// balance (support); "" for a member who reads neither.
func (v view) MoneyHome() string {
	switch {
	case v.Can(string(authz.Balance), "read"):
		return dashboardPath + "/balance"
	case v.Can(string(authz.Disputes), "read"):
		return dashboardPath + "/disputes"
	}
	return ""
}

// notices are the confirmations an action's redirect names.
var notices = map[string]string{
	"signed_out":       "You have signed out.",
	"revoked":          "The key is revoked. Requests with it are refused on every replica.",
	"capture":          "Capture requested. The worker captures the charge with the provider; this page updates when it is done.",
	"void":             "Void requested. The worker releases the authorization, or cancels the charge that waits for the cardholder; this page updates when it is done.",
	"refund":           "Refund created. The worker sends it to the provider; this page updates when it succeeds.",
	"updated":          "Endpoint saved.",
	"test":             "Test delivery queued. Its attempt appears in the delivery log below.",
	"retry":            "Delivery queued again. Its next attempt appears in the log below.",
	"deleted":          "Endpoint deleted.",
	"customer_deleted": "Customer deleted, with its saved cards and the keys that sealed them. Its charges are kept.",
	"card_deleted":     "Saved card deleted, with the key that sealed it. Charges already made with it are kept.",
	"already_done":     "That request was already made; nothing new was done.",
	"conn_created":     "Connector created. Name it in the routing to send charges to it.",
	"conn_enabled":     "Connector enabled. Routes that name it use it again.",
	"conn_disabled":    "Connector disabled. Charges skip it, also where the routing names it.",
	"rehearsal_saved":  "Rehearsal saved. The worker applies it within a second.",
	"conn_deleted":     "Connector deleted. Charges it took keep using it for captures, voids and refunds.",
	"routing_saved":    "Routing saved. New charges follow it on every replica.",
	"role_changed":     "Role changed. It applies from the member's next request.",
	"member_removed":   "Member removed. Their sessions have ended on every replica; the keys they made keep working until you revoke them.",
	"password_set":     "Password set. Sign in with your email and the new password.",
	"mfa_required":     "Your account requires two-factor sign-in. Set it up here to continue.",
	"mfa_policy_on":    "Two-factor sign-in is now required: members without it can only set it up until they do.",
	"mfa_policy_off":   "Two-factor sign-in is no longer required of every member.",
	"payout_created":   "Payout created: its amount has left your available balance. The worker sends it on its way; it arrives on its arrival date.",
	"reconciled":       "Reconciled. What differs is listed below, open until someone resolves it; nothing was adjusted.",
	"adjusted":         "Exception resolved: the difference is booked to your balance as an adjustment.",
	"accepted":         "Exception accepted: it is closed and nothing was booked.",
	"evidence_saved":   "Evidence saved. Nothing is sent to the provider until the evidence is submitted.",
	"evidence_sent":    "Evidence submitted. The worker sends it to the provider, which decides the dispute; this page shows its decision when it arrives.",
	"dispute_closed":   "Dispute accepted and closed (an accepted chargeback is lost, with its amount). The worker tells the provider.",
}

// failureTitles head a failure page by its status.
var failureTitles = map[int]string{
	fiber.StatusBadRequest:            "Check what you entered",
	fiber.StatusUnauthorized:          "Signed out",
	fiber.StatusForbidden:             "Refused",
	fiber.StatusNotFound:              "Not found",
	fiber.StatusConflict:              "Not possible now",
	fiber.StatusRequestEntityTooLarge: "Too large",
	fiber.StatusUnprocessableEntity:   "Already used",
	fiber.StatusTooManyRequests:       "Too many requests",
	fiber.StatusServiceUnavailable:    "Temporarily unavailable",
}

// renderDashboardError is renderError for dashboard pages: the same status,
// an HTML page with the message and the request id, and a way back.
func (s *server) renderDashboardError(c *fiber.Ctx, status int, ae *apperr.Error) error {
	v := view{Title: failureTitles[status], Error: ae.Message, ErrorCode: ae.Code, Back: dashboardBack(c, status)}
	if v.Title == "" {
		v.Title = "Something went wrong"
	}
	if status == fiber.StatusUnauthorized {
		v.Back = dashboardPath + "/login"
	}
	// The failure page has no form: it needs neither the merchant nor a token.
	return s.render(c, status, "error", v)
}

// dashboardBack is the page to go back to from a failure: the page a form
// was posted from, or the section of a page that failed, or of an object
// that was not found (the link never names an id that is not the caller's).
func dashboardBack(c *fiber.Ctx, status int) string {
	parts := strings.Split(strings.Trim(c.Path(), "/"), "/")
	switch {
	case len(parts) < 2 || parts[0] != "dashboard":
		return dashboardPath
	case parts[1] == "deliveries": // no page of its own
		return dashboardPath + "/webhooks"
	case status == fiber.StatusNotFound:
		return "/" + path.Join(parts[:2]...)
	case c.Method() == fiber.MethodPost && len(parts) >= 4:
		return "/" + path.Join(parts[:3]...)
	case c.Method() == fiber.MethodPost:
		return "/" + path.Join(parts...)
	}
	return "/" + path.Join(parts[:2]...)
}

func isDashboard(c *fiber.Ctx) bool {
	p := c.Path()
	return p == dashboardPath || strings.HasPrefix(p, dashboardPath+"/")
}

// overTLS reports whether the browser reached us over TLS: directly, or
// through a trusted proxy that says so.
func (s *server) overTLS(c *fiber.Ctx) bool {
	if c.Context().IsTLS() {
		return true
	}
	peer := c.Context().RemoteIP()
	return len(s.trusted) > 0 && s.trusted.contains(addrOf(peer)) && strings.EqualFold(c.Get(fiber.HeaderXForwardedProto), "https")
}

func (s *server) setCookie(c *fiber.Ctx, name, value, path string, expires time.Time) {
	c.Cookie(&fiber.Cookie{Name: name, Value: value, Path: path, Expires: expires,
		HTTPOnly: true, Secure: s.overTLS(c), SameSite: fiber.CookieSameSiteStrictMode})
}

func (s *server) clearCookie(c *fiber.Ctx, name, path string) {
	s.setCookie(c, name, "", path, fasthttp.CookieExpireDelete)
}

// csrfToken binds a form to a session.
func (s *server) csrfToken(sessionID string) string {
	return base64.RawURLEncoding.EncodeToString(s.Keyring.MAC(keyring.PurposeCSRF, []byte("session"), []byte(sessionID)))
}

// loginToken binds the sign-in form to the nonce in its cookie.
func (s *server) loginToken(nonce string) string {
	return base64.RawURLEncoding.EncodeToString(s.Keyring.MAC(keyring.PurposeCSRF, []byte("login"), []byte(nonce)))
}

// crossSite reports a request that a browser says did not come from one of
// the dashboard's own pages. Browsers send Sec-Fetch-Site; older ones send
// Origin, checked against the Host the request was sent to.
func crossSite(c *fiber.Ctx) bool {
	switch c.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return true
	case "same-origin", "none":
		return false
	}
	origin := c.Get(fiber.HeaderOrigin)
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	return err != nil || u.Host != c.Hostname()
}

// dashSession authenticates the session cookie. Without a valid one a page
// is redirected to the sign-in page and a form is refused.
func (s *server) dashSession(c *fiber.Ctx) error {
	token := c.Cookies(sessionCookie)
	if token == "" {
		return s.signInAgain(c)
	}
	p, err := s.Auth.Authenticate(c.UserContext(), strings.Clone(token))
	if err != nil {
		if apperr.KindOf(err) != apperr.KindUnauthenticated {
			return err
		}
		s.Metrics.AuthFailures.WithLabelValues(apperr.CodeOf(err)).Inc()
		s.clearCookie(c, sessionCookie, dashboardPath)
		return s.signInAgain(c)
	}
	c.Locals(localPrincipal, p)
	if err := s.authorize(c); err != nil {
		if p.MFAPending && (c.Method() == fiber.MethodGet || c.Method() == fiber.MethodHead) {
			// A member who must set up two-factor sign-in is led to it.
			return redirectNotice(c, dashboardPath+"/security", "mfa_required")
		}
		return err
	}
	return s.audited(c)
}

func (s *server) signInAgain(c *fiber.Ctx) error {
	if c.Method() == fiber.MethodGet || c.Method() == fiber.MethodHead {
		dashboardHeaders(c)
		return c.Redirect(dashboardPath+"/login", fiber.StatusSeeOther)
	}
	return errSignedOut
}

// dashCSRF refuses a state-changing request that is cross-site or does not
// carry the session's CSRF token.
func (s *server) dashCSRF(c *fiber.Ctx) error {
	if crossSite(c) {
		return errCrossSite
	}
	want := s.csrfToken(principal(c).SessionID)
	if subtle.ConstantTimeCompare([]byte(c.FormValue(csrfField)), []byte(want)) != 1 {
		return errCSRF
	}
	return c.Next()
}

// form is a posted field, copied out of the request's buffer.
func form(c *fiber.Ctx, name string) string {
	return strings.TrimSpace(strings.Clone(c.FormValue(name)))
}

// formIdem is the idempotency request of a money form: the key the page
// rendered into it (so a double submit does one thing) and a fingerprint of
// the action and its fields.
func (s *server) formIdem(c *fiber.Ctx, fields ...string) (*idempotency.Request, error) {
	key := form(c, idemField)
	if key == "" || !ids.ValidUUID(key) {
		return nil, apperr.Invalid(idemField, "The form is missing its request key. Reload the page and try again.")
	}
	parts := [][]byte{[]byte("dashboard"), []byte(c.Path())}
	for _, f := range fields {
		parts = append(parts, []byte(f))
	}
	return &idempotency.Request{Key: "dashboard_" + key, Fingerprint: s.Keyring.MAC(keyring.PurposeIdempotency, parts...)}, nil
}

// dashboardRoutes registers the dashboard.
func (s *server) dashboardRoutes(app *fiber.App) {
	cfg := s.Config
	login := s.limitByIP("login", cfg.RateLimitLogin)
	perIP := s.limitByIP("default", cfg.RateLimitDefault)
	in := []fiber.Handler{perIP, s.dashSession}
	act := []fiber.Handler{perIP, s.dashSession, s.dashCSRF}
	get := func(p string, h fiber.Handler) { app.Get(dashboardPath+p, append(in, h)...) }
	post := func(p string, h fiber.Handler) { app.Post(dashboardPath+p, append(act, h)...) }

	app.Get(dashboardPath+"/assets/dashboard.css", dashboardAsset("dashboard.css", "text/css; charset=utf-8"))
	app.Get(dashboardPath+"/assets/dashboard.js", dashboardAsset("dashboard.js", "text/javascript; charset=utf-8"))
	app.Get(dashboardPath+"/assets/favicon.svg", dashboardAsset("favicon.svg", "image/svg+xml"))
	app.Get(dashboardPath+"/login", perIP, s.loginPage)
	app.Post(dashboardPath+"/login", login, s.dashLogin)
	app.Post(dashboardPath+"/login/mfa", login, s.dashLoginMFA)
	app.Get(dashboardPath+"/setup", perIP, s.setupPage)
	app.Post(dashboardPath+"/setup", s.limitByIP("setup", cfg.RateLimitLogin), s.dashSetup)
	post("/logout", s.dashLogout)
	get("", func(c *fiber.Ctx) error { return c.Redirect(dashboardPath+"/charges", fiber.StatusSeeOther) })

	get("/keys", s.keysPage)
	post("/keys", s.dashCreateKey)
	post("/keys/:id/revoke", s.dashRevokeKey)
	post("/keys/:id/roll", s.dashRollKey)

	get("/charges", s.chargesPage)
	get("/charges/:id", s.chargePage)
	post("/charges/:id/capture", s.dashCapture)
	post("/charges/:id/void", s.dashVoid)
	post("/charges/:id/refund", s.dashRefund)

	get("/balance", s.balancePage)
	get("/payouts", s.payoutsPage)
	post("/payouts", s.dashCreatePayout)
	get("/payouts/:id", s.payoutPage)
	get("/reconciliations", s.reconciliationsPage)
	post("/reconciliations", s.dashCreateReconciliation)
	get("/reconciliations/:id", s.reconciliationPage)
	post("/reconciliations/:id/exceptions/:exc/resolve", s.dashResolveException)
	get("/disputes", s.disputesPage)
	get("/disputes/:id", s.disputePage)
	post("/disputes/:id", s.dashUpdateDispute)
	post("/disputes/:id/close", s.dashCloseDispute)

	get("/customers", s.customersPage)
	get("/customers/:id", s.customerPage)
	post("/customers/:id/delete", s.dashDeleteCustomer)
	post("/customers/:id/payment_methods/:pm_id/delete", s.dashDeleteCard)

	get("/connectors", s.connectorsPage)
	post("/connectors", s.dashCreateConnector)
	get("/connectors/:id", s.connectorPage)
	post("/connectors/:id/enabled", s.dashConnectorEnabled)
	post("/connectors/:id/rehearsal", s.dashConnectorRehearsal)
	post("/connectors/:id/delete", s.dashDeleteConnector)
	get("/routing", s.routingPage)
	post("/routing", s.dashPutRouting)

	get("/events", s.eventsPage)
	get("/events/:id", s.eventPage)

	get("/webhooks", s.webhooksPage)
	post("/webhooks", s.dashCreateEndpoint)
	get("/webhooks/:id", s.webhookPage)
	post("/webhooks/:id", s.dashUpdateEndpoint)
	post("/webhooks/:id/rotate", s.dashRotate)
	post("/webhooks/:id/test", s.dashTest)
	post("/webhooks/:id/recover", s.dashRecover)
	post("/webhooks/:id/delete", s.dashDeleteEndpoint)
	post("/deliveries/:id/retry", s.dashRetry)

	get("/team", s.teamPage)
	post("/team", s.dashInvite)
	post("/team/:id/role", s.dashMemberRole)
	post("/team/:id/remove", s.dashRemoveMember)
	get("/audit", s.auditPage)

	post("/team/settings", s.dashTeamSettings)

	get("/security", s.securityPage)
	post("/security/totp", s.dashEnrollTOTP)
	post("/security/totp/confirm", s.dashConfirmTOTP)
}

// dashboardAsset serves an embedded script or style sheet.
func dashboardAsset(name, contentType string) fiber.Handler {
	body, err := dashboardFiles.ReadFile("dashboard/" + name)
	if err != nil {
		panic(err) // embedded at build time
	}
	return func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, contentType)
		c.Set(fiber.HeaderContentSecurityPolicy, "default-src 'none'; frame-ancestors 'none'")
		c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
		c.Set(fiber.HeaderCacheControl, "public, max-age=300")
		return c.Send(body)
	}
}

// loginPage is the sign-in form, with a fresh nonce cookie for its token.
// ?merchant= names the account to sign in to, for an address that belongs
// to more accounts than a sign-in without one checks.
func (s *server) loginPage(c *fiber.Ctx) error {
	v := loginView{}
	if m := c.Query("merchant"); ids.Valid("mer", m) {
		v.Merchant = strings.Clone(m)
	}
	return s.renderLogin(c, fiber.StatusOK, v, "")
}

// loginView is the sign-in form's state: the email typed, and the account
// named, or the accounts to choose from when the password opened several.
type loginView struct {
	Email     string
	Merchant  string
	Merchants []apperr.Merchant
}

func (s *server) renderLogin(c *fiber.Ctx, status int, data loginView, failure string) error {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return apperr.Internal(err)
	}
	nonce := hex.EncodeToString(b[:])
	s.setCookie(c, loginCookie, nonce, dashboardPath+"/login", time.Now().Add(time.Hour))
	v := view{Title: "Sign in", CSRF: s.loginToken(nonce), Error: failure, Notice: notices[c.Query("notice")], Data: data}
	return s.render(c, status, "login", v)
}

// signedOutForm checks a form of the signed-out pages (sign-in and its
// second step, setup): not cross-site, and carrying the token bound to the
// page's nonce cookie, which it returns.
func (s *server) signedOutForm(c *fiber.Ctx) (string, error) {
	if crossSite(c) {
		return "", errCrossSite
	}
	nonce := c.Cookies(loginCookie)
	if nonce == "" || subtle.ConstantTimeCompare([]byte(c.FormValue(csrfField)), []byte(s.loginToken(nonce))) != 1 {
		return "", errCSRF
	}
	return strings.Clone(nonce), nil
}

// dashLogin signs in with the same limits and the same session as
// POST /v1/auth/login. When the password opened several accounts, the form
// comes back with a choice of those (and the password to type again).
func (s *server) dashLogin(c *fiber.Ctx) error {
	nonce, err := s.signedOutForm(c)
	if err != nil {
		return err
	}
	email, password, merchant := form(c, "email"), strings.Clone(c.FormValue("password")), form(c, "merchant")
	attempted, err := s.guardLogin(c, email, password)
	if err != nil {
		return err
	}
	l, err := s.Auth.Login(s.auditedSignIn(c, "session.create"), email, password, merchant)
	if err != nil || l.Token != "" {
		attempted(err) // as login: a password step alone is no sign-in
	}
	if err == nil && l.Choices != nil {
		err = s.chooseMerchant(c, l.Choices)
	}
	if err != nil {
		ae, ok := apperr.As(err)
		if !ok || ae.Kind != apperr.KindUnauthenticated && ae.Kind != apperr.KindInvalid {
			return err
		}
		if ae.Kind == apperr.KindUnauthenticated {
			s.Metrics.AuthFailures.WithLabelValues(ae.Code).Inc()
		}
		v := loginView{Email: email, Merchants: ae.Merchants}
		if ids.Valid("mer", merchant) {
			v.Merchant = merchant
		}
		if ae.Merchants != nil {
			return s.renderLogin(c, fiber.StatusOK, v, "This email belongs to several accounts: choose one, and enter its password again.")
		}
		return s.renderLogin(c, statusOf[ae.Kind], v, ae.Message)
	}
	if l.SecondFactor {
		challenge, err := s.challenge(c, l.Member)
		if err != nil {
			return err
		}
		return s.renderLoginMFA(c, fiber.StatusOK, nonce, challenge, "")
	}
	return s.signedInTo(c, l)
}

// signedInTo sets the session cookie of a completed sign-in and opens the
// dashboard: the Security page for a member who must set up two-factor
// sign-in first.
func (s *server) signedInTo(c *fiber.Ctx, l auth.Login) error {
	s.setCookie(c, sessionCookie, l.Token, dashboardPath, l.ExpiresAt)
	s.clearCookie(c, loginCookie, dashboardPath+"/login")
	if l.Member.MFARequired && !l.Member.MFAEnabled {
		return redirectNotice(c, dashboardPath+"/security", "mfa_required")
	}
	dashboardHeaders(c)
	return c.Redirect(dashboardPath+"/charges", fiber.StatusSeeOther)
}

// dashLogout ends the session on every replica, as DELETE /v1/auth/logout.
func (s *server) dashLogout(c *fiber.Ctx) error {
	if err := s.Auth.Logout(c.UserContext(), principal(c)); err != nil {
		return err
	}
	s.clearCookie(c, sessionCookie, dashboardPath)
	dashboardHeaders(c)
	return c.Redirect(dashboardPath+"/login?notice=signed_out", fiber.StatusSeeOther)
}

// redirectNotice sends the browser back to a page with a notice.
func redirectNotice(c *fiber.Ctx, to, notice string) error {
	dashboardHeaders(c)
	return c.Redirect(to+"?notice="+notice, fiber.StatusSeeOther)
}

// pager is a list page's position and its links.
type pager struct {
	params   listing.Params
	base     url.Values
	pathName string
	Prev     string
	Next     string
}

// newPager reads starting_after / ending_before; filters are the query
// values kept in the links.
func newPager(c *fiber.Ctx, pathName string, valid func(string) bool, filters url.Values) (*pager, error) {
	p, err := cursors(c, listing.Params{Limit: dashboardPageSize}, valid)
	if err != nil {
		return nil, err
	}
	return &pager{params: p, base: filters, pathName: pathName}, nil
}

// pageItems sets the pager's links for page and returns its items.
func pageItems[T any](pg *pager, page listing.Page[T], idOf func(T) string) []T {
	if n := len(page.Items); n > 0 {
		pg.links(idOf(page.Items[0]), idOf(page.Items[n-1]), page.HasMore)
	}
	return page.Items
}

// links sets Prev and Next for a page whose first and last ids are given.
func (p *pager) links(first, last string, hasMore bool) {
	link := func(k, v string) string {
		q := url.Values{}
		for name, vals := range p.base {
			for _, x := range vals {
				if x != "" {
					q.Add(name, x)
				}
			}
		}
		q.Set(k, v)
		return p.pathName + "?" + q.Encode()
	}
	if first == "" {
		if p.params.EndingBefore != "" { // paged back past the newest: start over
			p.Prev = ""
		}
		return
	}
	backward := p.params.EndingBefore != ""
	if backward && hasMore || !backward && p.params.StartingAfter != "" {
		p.Prev = link("ending_before", first)
	}
	if backward || hasMore {
		p.Next = link("starting_after", last)
	}
}

// prettyJSON indents a JSON document for display.
func prettyJSON(b []byte) string {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return string(b)
	}
	return out.String()
}
