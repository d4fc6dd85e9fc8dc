package httpapi_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestMemberEmailsPerMerchant: member emails are unique per merchant. An
// invitation of an address that is a member of another merchant answers
// as any other and tells nothing about it; one of a member of the same
// merchant is refused as before. The person then holds a membership in
// each, with its own password: the password chooses the membership when it
// opens one; when it opens several, the sign-in must name the merchant and
// the answer lists those, and only those; a named merchant costs one hash
// and answers as a wrong password when the address is no member there.
// Removing one membership leaves the other.
func TestMemberEmailsPerMerchant(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv)
	a := h.account("a-owner@example.com")
	const bPassword = "b owner password"
	bID := h.merchant("b-owner@example.com", bPassword)
	bToken := h.login("b-owner@example.com", bPassword)

	// B's owner is invited to A like anyone: same answer, nothing of B.
	r := h.do("POST", "/v1/me/members", `{"email":"B-Owner@Example.com","role":"developer"}`, bearer(a.token)...)
	want(t, r, 201, "")
	fresh := h.do("POST", "/v1/me/members", `{"email":"fresh@example.com","role":"developer"}`, bearer(a.token)...)
	want(t, fresh, 201, "")
	keysOf := func(m map[string]any) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	if !slices.Equal(keysOf(r.body), keysOf(fresh.body)) || !slices.Equal(keysOf(obj(r.body["member"])), keysOf(obj(fresh.body["member"]))) ||
		strings.Contains(string(r.raw), bID) || strings.Contains(string(r.raw), strings.TrimPrefix(bID, "mer_")) {
		t.Fatalf("an invitation of another merchant's owner differs from any other: %s vs %s", r.raw, fresh.raw)
	}
	// The same address in the same merchant is refused as before, in any case.
	for _, email := range []string{"b-owner@example.com", "a-owner@example.com", "FRESH@example.com"} {
		dup := h.do("POST", "/v1/me/members", `{"email":"`+email+`","role":"viewer"}`, bearer(a.token)...)
		want(t, dup, 400, "parameter_invalid")
		if dup.errField("param") != "email" || dup.errField("message") != "This email already belongs to a member." {
			t.Fatalf("%s again: %s", email, dup.raw)
		}
	}

	// The person sets a password of A's membership: B's is untouched, and
	// each password opens its own membership.
	const inA = "a membership password"
	want(t, h.do("POST", "/v1/auth/setup", `{"token":"`+setupToken(t, r)+`","password":"`+inA+`"}`), 200, "")
	signIn := func(email, password, merchant string) response {
		t.Helper()
		body := `{"email":"` + email + `","password":"` + password + `"`
		if merchant != "" {
			body += `,"merchant":"` + merchant + `"`
		}
		return h.do("POST", "/v1/auth/login", body+`}`)
	}
	session := func(r response, merchantID string) string {
		t.Helper()
		want(t, r, 200, "")
		if obj(r.body["merchant"])["id"] != merchantID {
			t.Fatalf("signed in to %v, want %s", obj(r.body["merchant"])["id"], merchantID)
		}
		return r.body["token"].(string)
	}
	session(signIn("b-owner@example.com", bPassword, ""), bID)
	session(signIn("b-owner@example.com", inA, ""), a.merchantID)
	want(t, h.do("GET", "/v1/me/members", "", bearer(bToken)...), 200, "")

	// The same password for two memberships: the sign-in must choose.
	const same = "one password for two"
	cID := h.merchant("c@example.com", same)
	r = h.do("POST", "/v1/me/members", `{"email":"c@example.com","role":"viewer"}`, bearer(a.token)...)
	want(t, r, 201, "")
	cInA := obj(r.body["member"])["id"].(string)
	want(t, h.do("POST", "/v1/auth/setup", `{"token":"`+setupToken(t, r)+`","password":"`+same+`"}`), 200, "")
	r = signIn("C@example.com", same, "")
	want(t, r, 400, "parameter_missing")
	if r.errField("param") != "merchant" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("an ambiguous sign-in: %s", r.raw)
	}
	var choices []string
	for _, m := range obj(r.body["error"])["merchants"].([]any) {
		choices = append(choices, obj(m)["id"].(string)+" "+obj(m)["name"].(string))
	}
	if wantChoices := []string{cID + " Test c@example.com", a.merchantID + " Test a-owner@example.com"}; !slices.Equal(choices, wantChoices) {
		t.Fatalf("choices %q, want %q", choices, wantChoices)
	}
	session(signIn("c@example.com", same, a.merchantID), a.merchantID)
	cToken := session(signIn("c@example.com", same, cID), cID)

	// A named merchant: a wrong password, or a merchant the address is no
	// member of, answer as an unknown address; a malformed id is a bad
	// parameter.
	unknown := signIn("nobody@example.com", same, "")
	want(t, unknown, 401, "invalid_credentials")
	for _, r := range []response{signIn("c@example.com", "wrong password", cID), signIn("c@example.com", same, bID),
		signIn("c@example.com", "wrong password", ""), signIn("nobody@example.com", same, cID)} {
		want(t, r, 401, "invalid_credentials")
		if withoutRequestID(r.raw) != withoutRequestID(unknown.raw) {
			t.Fatalf("%s, want %s", r.raw, unknown.raw)
		}
	}
	r = signIn("c@example.com", same, "acct_123")
	want(t, r, 400, "parameter_invalid")
	if r.errField("param") != "merchant" {
		t.Fatalf("a malformed merchant: %s", r.raw)
	}

	// The dashboard offers the choice, then signs in to the one chosen.
	d := h.dashClient(t)
	d.get("/dashboard/login")
	p := d.send(http.MethodPost, "/dashboard/login", url.Values{"csrf_token": {d.csrf}, "email": {"c@example.com"}, "password": {same}})
	if p.status != 200 || d.cookie() != "" || !strings.Contains(p.body, `<option value="`+cID+`">`) ||
		!strings.Contains(p.body, `<option value="`+a.merchantID+`">`) || strings.Contains(p.body, bID) {
		t.Fatalf("the dashboard's choice: %d\n%.3000s", p.status, p.body)
	}
	p = d.send(http.MethodPost, "/dashboard/login", url.Values{"csrf_token": {d.csrf}, "email": {"c@example.com"}, "password": {same}, "merchant": {cID}})
	if p.status != http.StatusSeeOther || p.location != "/dashboard/charges" || d.cookie() == "" {
		t.Fatalf("sign in to the chosen account: %d to %q\n%.800s", p.status, p.location, p.body)
	}

	// Removing the membership in A leaves the one in C, which the password
	// then opens alone.
	want(t, h.do("DELETE", "/v1/me/members/"+cInA, "", bearer(a.token)...), 200, "")
	want(t, h.do("GET", "/v1/me", "", bearer(cToken)...), 200, "")
	session(signIn("c@example.com", same, ""), cID)
}
