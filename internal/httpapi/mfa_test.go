package httpapi_test

// Two-factor sign-in (docs/team.md): enrollment, the two-step sign-in,
// codes limited like passwords, and an account that requires it.

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/mfa"
)

// totpNow is the code of secret for the step offset steps from now.
func totpNow(t *testing.T, secret string, offset int64) string {
	t.Helper()
	c, err := mfa.Code(secret, mfa.Step(time.Now())+offset)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// enrollMFA turns two-factor sign-in on for the session's member and
// returns its secret and recovery codes.
func (h *harness) enrollMFA(token string) (string, []string) {
	t := h.t
	t.Helper()
	r := h.do("POST", "/v1/me/mfa/totp", "", bearer(token)...)
	want(t, r, 200, "")
	secret := r.body["secret"].(string)
	u, err := url.Parse(r.body["otpauth_url"].(string))
	if err != nil || u.Scheme != "otpauth" || u.Query().Get("secret") != secret || u.Query().Get("issuer") != "Gatehouse" {
		t.Fatalf("otpauth_url %v", r.body["otpauth_url"])
	}
	h.confirmedCode = totpNow(t, secret, 0)
	r = h.do("POST", "/v1/me/mfa/totp/confirm", `{"code":"`+h.confirmedCode+`"}`, bearer(token)...)
	want(t, r, 200, "")
	if r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("recovery codes cacheable: %q", r.header.Get("Cache-Control"))
	}
	var codes []string
	for _, c := range r.body["recovery_codes"].([]any) {
		codes = append(codes, c.(string))
	}
	if len(codes) != 10 || r.body["member"].(map[string]any)["mfa_enabled"] != true {
		t.Fatalf("confirm: %s", r.raw)
	}
	return secret, codes
}

// challengeOf is the challenge of a sign-in whose password was right and
// whose second step is due: 401 mfa_required, the challenge in the error
// object, no token, not cacheable.
func challengeOf(t *testing.T, r response) string {
	t.Helper()
	want(t, r, 401, "mfa_required")
	challenge := r.errField("challenge")
	if !strings.HasPrefix(challenge, "mfa_") || r.body["token"] != nil || r.body["challenge"] != nil {
		t.Fatalf("sign-in of a member with two-factor on: %s", r.raw)
	}
	if r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("the challenge is cacheable: %q", r.header.Get("Cache-Control"))
	}
	return challenge
}

// mfaEnv allows the sign-ins a test makes from one address.
func mfaEnv(env map[string]string) { env["RATE_LIMIT_LOGIN"] = "1000/1m" }

func TestTwoFactor(t *testing.T) {
	t.Parallel()
	h := newHarness(t, mfaEnv)
	const email, password = "ada@example.com", "correct horse battery"
	h.merchant(email, password)
	token := h.login(email, password)
	loginBody := `{"email":"` + email + `","password":"` + password + `"}`

	// A wrong or malformed first code, and a confirmation with nothing pending.
	want(t, h.do("POST", "/v1/me/mfa/totp/confirm", `{"code":"123456"}`, bearer(token)...), 409, "invalid_state")
	r := h.do("POST", "/v1/me/mfa/totp", "", bearer(token)...)
	want(t, r, 200, "")
	pending := r.body["secret"].(string)
	r = h.do("POST", "/v1/me/mfa/totp/confirm", `{"code":"`+totpNow(t, pending, 5)+`"}`, bearer(token)...)
	want(t, r, 400, "parameter_invalid")
	if r.errField("param") != "code" {
		t.Fatalf("wrong code: %s", r.raw)
	}
	want(t, h.do("POST", "/v1/me/mfa/totp/confirm", `{"code":"12ab56"}`, bearer(token)...), 400, "parameter_invalid")
	want(t, h.do("POST", "/v1/me/mfa/totp/confirm", `{}`, bearer(token)...), 400, "parameter_missing")
	// Still off: sign-in is one step.
	want(t, h.do("POST", "/v1/auth/login", loginBody), 200, "")

	secret, recovery := h.enrollMFA(token)
	if secret == pending {
		t.Fatal("a new enrollment kept the old secret")
	}
	want(t, h.do("POST", "/v1/me/mfa/totp", "", bearer(token)...), 409, "invalid_state")
	// The session that enrolled goes on; the team shows it on.
	r = h.do("GET", "/v1/me/members", "", bearer(token)...)
	want(t, r, 200, "")
	if !strings.Contains(string(r.raw), `"mfa_enabled":true`) {
		t.Fatalf("members: %s", r.raw)
	}

	// Two steps now. A wrong code, a made-up challenge.
	challenge := challengeOf(t, h.do("POST", "/v1/auth/login", loginBody))
	want(t, h.do("POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`","code":"`+totpNow(t, secret, 4)+`"}`), 401, "invalid_credentials")
	want(t, h.do("POST", "/v1/auth/mfa", `{"challenge":"mfa_made-up","code":"`+totpNow(t, secret, 1)+`"}`), 401, "invalid_token")
	want(t, h.do("POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`"}`), 400, "parameter_missing")
	// The confirming code was used already (that very code: a 30 s step
	// may have begun since).
	want(t, h.do("POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`","code":"`+h.confirmedCode+`"}`), 401, "invalid_credentials")
	// The next step's code signs in, once.
	next := totpNow(t, secret, 1)
	r = h.do("POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`","code":"`+next+`"}`)
	want(t, r, 200, "")
	session := r.body["token"].(string)
	if r.body["member"].(map[string]any)["mfa_enabled"] != true {
		t.Fatalf("session: %s", r.raw)
	}
	want(t, h.do("GET", "/v1/me", "", bearer(session)...), 200, "")
	// The challenge is used up; the code is too.
	want(t, h.do("POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`","code":"`+totpNow(t, secret, 1)+`"}`), 401, "invalid_token")
	challenge = challengeOf(t, h.do("POST", "/v1/auth/login", loginBody))
	want(t, h.do("POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`","code":"`+next+`"}`), 401, "invalid_credentials")

	// A recovery code signs in once, as typed (capitals, no dashes).
	typed := strings.ToUpper(strings.ReplaceAll(recovery[3], "-", ""))
	want(t, h.do("POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`","code":"`+typed+`"}`), 200, "")
	challenge = challengeOf(t, h.do("POST", "/v1/auth/login", loginBody))
	want(t, h.do("POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`","code":"`+recovery[3]+`"}`), 401, "invalid_credentials")

	// Secrets are sealed, codes and challenges kept as digests.
	var plain int
	if err := h.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM members WHERE position($1::bytea IN mfa_secret_sealed) > 0`,
		[]byte(secret)).Scan(&plain); err != nil || plain != 0 {
		t.Fatalf("the secret is stored in the clear (%v)", err)
	}
	if err := h.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM mfa_recovery_codes WHERE digest = $1::bytea OR digest = $2::bytea`,
		[]byte(recovery[0]), []byte(strings.ReplaceAll(recovery[0], "-", ""))).Scan(&plain); err != nil || plain != 0 {
		t.Fatalf("a recovery code is stored in the clear (%v)", err)
	}
}

// TestTwoFactorLoginAnswer: login's 200 is the Session schema alone, as
// clients generated before two-factor sign-in expect; for a member with it
// on, the right password answers 401 mfa_required with the challenge in the
// error object, which POST /v1/auth/mfa completes. That answer is no failed
// sign-in (no auth failure counted, nothing of the account's budget spent)
// and no completed one either (the address does not become known).
func TestTwoFactorLoginAnswer(t *testing.T) {
	t.Parallel()
	const budget = 2
	h := loginBudgetHarness(t, budget)
	doc := h.spec.Doc()
	ok := doc.Paths.Value("/v1/auth/login").Post.Responses.Value("200").Value.Content.Get("application/json").Schema
	if ok.Ref != "#/components/schemas/Session" {
		t.Fatalf("login's 200 is %q, want the Session schema alone", ok.Ref)
	}
	isSession := func(r response) string {
		t.Helper()
		want(t, r, 200, "")
		var v any
		if err := json.Unmarshal(r.raw, &v); err != nil {
			t.Fatal(err)
		}
		if err := doc.Components.Schemas["Session"].Value.VisitJSON(v); err != nil {
			t.Fatalf("not a Session: %v\n%s", err, r.raw)
		}
		return r.body["token"].(string)
	}
	const email, password = "ada@example.com", "correct horse battery"
	h.merchant(email, password)
	loginBody := `{"email":"` + email + `","password":"` + password + `"}`
	secret, _ := h.enrollMFA(isSession(h.do("POST", "/v1/auth/login", loginBody))) // 127.0.0.1 is known

	// The right password from a new address, more times than the budget
	// of failures: a challenge each time, never a 429.
	stranger := clientFrom(t, "127.0.4.1")
	var challenge string
	for range budget + 2 {
		challenge = challengeOf(t, h.doWith(stranger, "POST", "/v1/auth/login", loginBody))
	}
	if m := h.do("GET", "/metrics", ""); strings.Contains(string(m.raw), "gatehouse_auth_failures_total{") {
		t.Fatalf("a right password counted as a failed authentication:\n%s", m.raw)
	}
	// Nor did it make the address known: once wrong passwords spend the
	// budget, the stranger's right password is refused.
	for range budget {
		want(t, h.doWith(clientFrom(t, "127.0.4.2"), "POST", "/v1/auth/login", `{"email":"`+email+`","password":"wrong"}`), 401, "invalid_credentials")
	}
	checkLimited(t, h.doWith(stranger, "POST", "/v1/auth/login", loginBody), budget)

	// The challenge and a code give the session, from the known address.
	session := isSession(h.do("POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`","code":"`+totpNow(t, secret, 1)+`"}`))
	want(t, h.do("GET", "/v1/me", "", bearer(session)...), 200, "")
}

// TestTwoFactorChallengeEnds: five wrong codes end a challenge.
func TestTwoFactorChallengeEnds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, mfaEnv)
	const email, password = "ada@example.com", "correct horse battery"
	h.merchant(email, password)
	secret, _ := h.enrollMFA(h.login(email, password))
	challenge := challengeOf(t, h.do("POST", "/v1/auth/login", `{"email":"`+email+`","password":"`+password+`"}`))
	for i := range mfa.ChallengeFailures {
		want(t, h.do("POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`","code":"00000`+strconv.Itoa(i)+`"}`), 401, "invalid_credentials")
	}
	want(t, h.do("POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`","code":"`+totpNow(t, secret, 1)+`"}`), 401, "invalid_token")
}

// TestTwoFactorConcurrentCodes: 60 wrong codes sent at once against one
// challenge check at most five: each is counted before it is compared, so
// every answer after the fifth says the challenge is spent, and then so
// does the right code.
func TestTwoFactorConcurrentCodes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv)
	const email, password = "ada@example.com", "correct horse battery"
	h.merchant(email, password)
	secret, _ := h.enrollMFA(h.login(email, password))
	challenge := challengeOf(t, h.do("POST", "/v1/auth/login", `{"email":"`+email+`","password":"`+password+`"}`))
	wrong := "000000"
	for offset := int64(-2); offset <= 2; offset++ {
		if totpNow(t, secret, offset) == wrong {
			wrong = "999999"
		}
	}
	const n = 60
	answers := burst(t, n, func(int) (response, error) {
		return h.with(t).try("POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`","code":"`+wrong+`"}`)
	})
	codes := map[string]int{}
	for _, r := range answers {
		codes[strconv.Itoa(r.status)+" "+r.errCode()]++
	}
	if codes["401 invalid_credentials"] > mfa.ChallengeFailures || codes["401 invalid_credentials"]+codes["401 invalid_token"] != n {
		t.Fatalf("%d wrong codes at once: %v; want at most %d checked (invalid_credentials), the rest refused (invalid_token)",
			n, codes, mfa.ChallengeFailures)
	}
	want(t, h.do("POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`","code":"`+totpNow(t, secret, 1)+`"}`), 401, "invalid_token")
	t.Logf("%d wrong codes at once: %v", n, codes)
}

// TestTwoFactorCodesLimited: wrong codes spend the account's budget of
// failed sign-ins with wrong passwords; once it is spent, codes are refused
// 429 from addresses that never completed a sign-in, the right one too,
// while the owner's known address still signs in. The per-address sign-in
// limit counts the second step too.
func TestTwoFactorCodesLimited(t *testing.T) {
	t.Parallel()
	const budget = 3
	h := loginBudgetHarness(t, budget)
	const email, password = "ada@example.com", "correct horse battery"
	h.merchant(email, password)
	secret, _ := h.enrollMFA(h.login(email, password)) // 127.0.0.1 is known
	loginBody := `{"email":"` + email + `","password":"` + password + `"}`

	attacker := clientFrom(t, "127.0.3.1")
	// The right password from a new address does not make it known.
	challenge := challengeOf(t, h.doWith(attacker, "POST", "/v1/auth/login", loginBody))
	want(t, h.doWith(attacker, "POST", "/v1/auth/login", `{"email":"`+email+`","password":"wrong"}`), 401, "invalid_credentials")
	for i := range budget - 1 {
		r := h.doWith(attacker, "POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`","code":"99999`+strconv.Itoa(i)+`"}`)
		want(t, r, 401, "invalid_credentials")
		if r.header.Get("RateLimit-Limit") != "40" {
			t.Fatalf("the second step is not under the per-address sign-in limit: %q", r.header.Get("RateLimit-Limit"))
		}
	}
	r := h.doWith(attacker, "POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`","code":"`+totpNow(t, secret, 0)+`"}`)
	checkLimited(t, r, budget)
	checkLimited(t, h.doWith(clientFrom(t, "127.0.3.2"), "POST", "/v1/auth/login", loginBody), budget)

	// The owner's address is not locked out.
	challenge = challengeOf(t, h.do("POST", "/v1/auth/login", loginBody))
	want(t, h.do("POST", "/v1/auth/mfa", `{"challenge":"`+challenge+`","code":"`+totpNow(t, secret, 1)+`"}`), 200, "")
}

// TestTwoFactorRequired: an owner requires two-factor sign-in; a member
// without it may then only set it up, read the account and sign out, until
// it is on.
func TestTwoFactorRequired(t *testing.T) {
	t.Parallel()
	h := newHarness(t, mfaEnv)
	const password = "correct horse battery"
	h.merchant("owner@example.com", password)
	owner := h.login("owner@example.com", password)
	r := h.do("POST", "/v1/me/members", `{"email":"dev@example.com","role":"developer"}`, bearer(owner)...)
	want(t, r, 201, "")
	setup, _ := url.Parse(r.body["setup_url"].(string))
	want(t, h.do("POST", "/v1/auth/setup", `{"token":"`+setup.Query().Get("token")+`","password":"`+password+`"}`), 200, "")
	dev := h.login("dev@example.com", password)

	r = h.do("GET", "/v1/me/settings", "", bearer(dev)...)
	want(t, r, 200, "")
	if r.body["mfa_required"] != false {
		t.Fatalf("settings: %s", r.raw)
	}
	want(t, h.do("PATCH", "/v1/me/settings", `{"mfa_required":true}`, bearer(dev)...), 403, "permission_denied")
	// The owner must use it first.
	want(t, h.do("PATCH", "/v1/me/settings", `{"mfa_required":true}`, bearer(owner)...), 409, "invalid_state")
	want(t, h.do("PATCH", "/v1/me/settings", `{}`, bearer(owner)...), 400, "parameter_missing")
	want(t, h.do("PATCH", "/v1/me/settings", `{"mfa_required":"yes"}`, bearer(owner)...), 400, "parameter_invalid")
	h.enrollMFA(owner)
	r = h.do("PATCH", "/v1/me/settings", `{"mfa_required":true}`, bearer(owner)...)
	want(t, r, 200, "")
	if r.body["mfa_required"] != true || r.body["object"] != "account_settings" {
		t.Fatalf("settings: %s", r.raw)
	}

	// The developer's open session is held to setting it up, at once.
	r = h.do("GET", "/v1/me/api_keys", "", bearer(dev)...)
	want(t, r, 403, "permission_denied")
	if !strings.Contains(r.errField("message"), "two-factor") {
		t.Fatalf("the refusal does not say why: %s", r.raw)
	}
	want(t, h.do("POST", "/v1/me/api_keys", "", bearer(dev)...), 403, "permission_denied")
	want(t, h.do("GET", "/v1/me", "", bearer(dev)...), 200, "")
	// A new sign-in is the same: a session that can only set it up.
	again := h.login("dev@example.com", password)
	want(t, h.do("GET", "/v1/me/api_keys", "", bearer(again)...), 403, "permission_denied")
	h.enrollMFA(dev)
	want(t, h.do("GET", "/v1/me/api_keys", "", bearer(dev)...), 200, "")
	want(t, h.do("GET", "/v1/me/api_keys", "", bearer(again)...), 200, "")
	want(t, h.do("DELETE", "/v1/auth/logout", "", bearer(again)...), 204, "")
	challengeOf(t, h.do("POST", "/v1/auth/login", `{"email":"dev@example.com","password":"`+password+`"}`))

	// Turned off, nobody is held.
	want(t, h.do("PATCH", "/v1/me/settings", `{"mfa_required":false}`, bearer(owner)...), 200, "")
}

var (
	secretText    = regexp.MustCompile(`id="totp-secret">([A-Z2-7]+)<`)
	recoveryText  = regexp.MustCompile(`<code>([a-z2-9]{4}-[a-z2-9]{4}-[a-z2-9]{4})</code>`)
	challengeText = regexp.MustCompile(`name="challenge" value="([^"]+)"`)
)

// TestDashboardTwoFactor: the Security page sets it up (QR code, key,
// recovery codes once); sign-in then has a second step; an owner requires
// it on the team page, and a member without it is led to Security.
func TestDashboardTwoFactor(t *testing.T) {
	t.Parallel()
	h := newHarness(t, mfaEnv)
	const email, password = "ada@example.com", "correct horse battery"
	h.merchant(email, password)
	d := h.dashClient(t)
	d.signIn(email, password)

	p := d.get("/dashboard/security")
	if p.status != 200 || !strings.Contains(p.body, `id="totp-start"`) || !strings.Contains(p.body, `href="/dashboard/security" aria-current="page"`) {
		t.Fatalf("security page: %d\n%.2000s", p.status, p.body)
	}
	if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "img-src 'self' data:") {
		t.Fatalf("CSP %q", csp)
	}
	p = d.post("/dashboard/security/totp", nil)
	m := secretText.FindStringSubmatch(p.body)
	if p.status != 200 || m == nil || !strings.Contains(p.body, `src="data:image/png;base64,`) {
		t.Fatalf("setup: %d\n%.3000s", p.status, p.body)
	}
	secret := m[1]
	// The pending setup is shown again on the page.
	if p = d.get("/dashboard/security"); !strings.Contains(p.body, secret) {
		t.Fatal("the pending key is not shown again")
	}
	p = d.post("/dashboard/security/totp/confirm", url.Values{"code": {totpNow(t, secret, 6)}})
	if p.status != 400 || !strings.Contains(p.body, "does not match") {
		t.Fatalf("wrong code: %d\n%.2000s", p.status, p.body)
	}
	p = d.post("/dashboard/security/totp/confirm", url.Values{"code": {totpNow(t, secret, 0)}})
	codes := recoveryText.FindAllStringSubmatch(p.body, -1)
	if p.status != 200 || len(codes) != 10 || !strings.Contains(p.body, `data-mfa="on"`) {
		t.Fatalf("confirm: %d, %d codes\n%.3000s", p.status, len(codes), p.body)
	}
	if p = d.get("/dashboard/security"); strings.Contains(p.body, codes[0][1]) || !strings.Contains(p.body, "10 unused recovery codes") {
		t.Fatalf("recovery codes shown again, or not counted:\n%.2000s", p.body)
	}

	// Sign out; sign in again in two steps.
	if p = d.post("/dashboard/logout", nil); p.status != http.StatusSeeOther {
		t.Fatalf("sign out: %d", p.status)
	}
	d.get("/dashboard/login")
	p = d.send(http.MethodPost, "/dashboard/login", url.Values{"csrf_token": {d.csrf}, "email": {email}, "password": {password}})
	ch := challengeText.FindStringSubmatch(p.body)
	if p.status != 200 || ch == nil || d.cookie() != "" {
		t.Fatalf("password step: %d %q\n%.2000s", p.status, d.cookie(), p.body)
	}
	p = d.send(http.MethodPost, "/dashboard/login/mfa", url.Values{"csrf_token": {d.csrf}, "challenge": {ch[1]}, "code": {"000000"}})
	if p.status != 401 || !strings.Contains(p.body, "Invalid two-factor code") || d.cookie() != "" {
		t.Fatalf("wrong code: %d\n%.2000s", p.status, p.body)
	}
	p = d.send(http.MethodPost, "/dashboard/login/mfa", url.Values{"csrf_token": {"forged"}, "challenge": {ch[1]}, "code": {totpNow(t, secret, 1)}})
	if p.status != 403 {
		t.Fatalf("forged CSRF token: %d", p.status)
	}
	p = d.send(http.MethodPost, "/dashboard/login/mfa", url.Values{"csrf_token": {d.csrf}, "challenge": {ch[1]}, "code": {totpNow(t, secret, 1)}})
	if p.status != http.StatusSeeOther || p.location != "/dashboard/charges" || d.cookie() == "" {
		t.Fatalf("code step: %d to %q\n%.2000s", p.status, p.location, p.body)
	}

	// Require it of everyone; an invited member is led to set it up.
	p = d.get("/dashboard/team")
	if !strings.Contains(p.body, `id="mfa-policy"`) {
		t.Fatalf("no policy form for the owner:\n%.3000s", p.body)
	}
	p = d.post("/dashboard/team", url.Values{"email": {"dev@example.com"}, "role": {"developer"}})
	link := regexp.MustCompile(`id="setup-url">[^<]*token=([^<"]+)<`).FindStringSubmatch(p.body)
	if link == nil {
		t.Fatalf("no setup link:\n%.3000s", p.body)
	}
	token, _ := url.QueryUnescape(link[1])
	want(t, h.do("POST", "/v1/auth/setup", `{"token":"`+token+`","password":"`+password+`"}`), 200, "")
	if p = d.post("/dashboard/team/settings", url.Values{"mfa_required": {"on"}}); p.status != http.StatusSeeOther {
		t.Fatalf("policy: %d\n%.2000s", p.status, p.body)
	}
	dev := h.dashClient(t)
	dev.get("/dashboard/login")
	p = dev.send(http.MethodPost, "/dashboard/login", url.Values{"csrf_token": {dev.csrf}, "email": {"dev@example.com"}, "password": {password}})
	if p.status != http.StatusSeeOther || p.location != "/dashboard/security?notice=mfa_required" {
		t.Fatalf("pending member's sign-in: %d to %q", p.status, p.location)
	}
	if p = dev.get("/dashboard/charges"); p.status != http.StatusSeeOther || p.location != "/dashboard/security?notice=mfa_required" {
		t.Fatalf("pending member on charges: %d to %q", p.status, p.location)
	}
	if p = dev.get("/dashboard/security?notice=mfa_required"); p.status != 200 || !strings.Contains(p.body, "requires two-factor sign-in") {
		t.Fatalf("pending member's security page: %d\n%.2000s", p.status, p.body)
	}
	if p = dev.post("/dashboard/keys", url.Values{"name": {"x"}}); p.status != 403 {
		t.Fatalf("pending member's form: %d", p.status)
	}
	// The developer does not see the policy form, and cannot post it.
	if p = dev.post("/dashboard/team/settings", nil); p.status != 403 {
		t.Fatalf("policy by a developer: %d", p.status)
	}
	if p = d.post("/dashboard/team/settings", nil); p.status != http.StatusSeeOther {
		t.Fatalf("policy off: %d", p.status)
	}
	if p = dev.get("/dashboard/charges"); p.status != 200 {
		t.Fatalf("developer after the policy is off: %d", p.status)
	}
}

// loginBudgetHarness is an API whose accounts may fail budget sign-ins a
// minute, with room for 40 sign-ins a minute per address.
func loginBudgetHarness(t *testing.T, budget int) *harness {
	t.Helper()
	return newHarness(t, func(env map[string]string) {
		env["RATE_LIMIT_LOGIN_ACCOUNT"] = strconv.Itoa(budget) + "/1m"
		env["RATE_LIMIT_LOGIN"] = "40/1m"
	})
}
