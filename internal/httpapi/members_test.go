package httpapi_test

import (
	"context"
	"net/url"
	"testing"
	"time"
)

// setupToken is the token of an invitation's setup link.
func setupToken(t *testing.T, r response) string {
	t.Helper()
	u, err := url.Parse(r.body["setup_url"].(string))
	if err != nil || u.Query().Get("token") == "" {
		t.Fatalf("setup_url %v: %v", r.body["setup_url"], err)
	}
	return u.Query().Get("token")
}

// TestMembers: an owner invites a member, who sets a password once through
// the setup link and signs in as that member; a role change holds from the
// next request; removing the member ends its sessions; only an owner
// changes owners, and the last owner stays.
func TestMembers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv)
	owner := h.account("boss@example.com")

	r := h.do("POST", "/v1/me/members", `{"email":"Dev@Example.com ","role":"developer"}`, bearer(owner.token)...)
	want(t, r, 201, "")
	member := obj(r.body["member"])
	if member["email"] != "dev@example.com" || member["role"] != "developer" || member["mfa_enabled"] != false {
		t.Fatalf("invited member %v", member)
	}
	token := setupToken(t, r)
	id := member["id"].(string)

	// Not signed in before the setup; the setup link works once.
	want(t, h.do("POST", "/v1/auth/login", `{"email":"dev@example.com","password":"`+matrixPassword+`"}`), 401, "invalid_credentials")
	want(t, h.do("POST", "/v1/auth/setup", `{"token":"`+token+`","password":"short"}`), 400, "parameter_invalid")
	want(t, h.do("POST", "/v1/auth/setup", `{"token":"`+token+`","password":"`+matrixPassword+`"}`), 200, "")
	r = h.do("POST", "/v1/auth/setup", `{"token":"`+token+`","password":"another password"}`)
	want(t, r, 400, "parameter_invalid")
	if r.errField("param") != "token" {
		t.Errorf("a used setup link: param %q, want token", r.errField("param"))
	}
	dev := h.login("dev@example.com", matrixPassword)
	r = h.do("POST", "/v1/auth/login", `{"email":"dev@example.com","password":"`+matrixPassword+`"}`)
	want(t, r, 200, "")
	if m := obj(r.body["member"]); m["id"] != id || m["role"] != "developer" || obj(r.body["merchant"])["id"] != owner.merchantID {
		t.Fatalf("login answers member %v of merchant %v", m, r.body["merchant"])
	}

	// A developer manages keys (restricted ones, within its role: see
	// TestKeysWithinTheirMakersRole) but not the team; members are the owner's business.
	want(t, h.do("POST", "/v1/me/api_keys", `{"name":"dev key"}`, bearer(dev)...), 403, "permission_denied")
	want(t, h.do("POST", "/v1/me/api_keys", `{"name":"dev key","type":"restricted","permissions":{"webhook_endpoints":"write"}}`, bearer(dev)...), 201, "")
	want(t, h.do("GET", "/v1/me/members", "", bearer(dev)...), 403, "permission_denied")
	want(t, h.do("POST", "/v1/me/members", `{"email":"x@example.com","role":"viewer"}`, bearer(dev)...), 403, "permission_denied")

	// A taken email, an unknown role.
	want(t, h.do("POST", "/v1/me/members", `{"email":"dev@example.com","role":"viewer"}`, bearer(owner.token)...), 400, "parameter_invalid")
	want(t, h.do("POST", "/v1/me/members", `{"email":"boss@example.com","role":"viewer"}`, bearer(owner.token)...), 400, "parameter_invalid")
	want(t, h.do("POST", "/v1/me/members", `{"email":"y@example.com","role":"root"}`, bearer(owner.token)...), 400, "parameter_invalid")

	// The role change holds from the developer's next request.
	r = h.do("PATCH", "/v1/me/members/"+id, `{"role":"viewer"}`, bearer(owner.token)...)
	want(t, r, 200, "")
	want(t, h.do("POST", "/v1/me/api_keys", `{"name":"viewer key","type":"restricted"}`, bearer(dev)...), 403, "permission_denied")
	want(t, h.do("GET", "/v1/me/api_keys", "", bearer(dev)...), 200, "")

	// An admin manages the team but not owners.
	r = h.do("POST", "/v1/me/members", `{"email":"admin@example.com","role":"admin"}`, bearer(owner.token)...)
	want(t, r, 201, "")
	adminID := obj(r.body["member"])["id"].(string)
	want(t, h.do("POST", "/v1/auth/setup", `{"token":"`+setupToken(t, r)+`","password":"`+matrixPassword+`"}`), 200, "")
	admin := h.login("admin@example.com", matrixPassword)
	ownerID := obj(h.do("GET", "/v1/me/members?limit=100", "", bearer(admin)...).body["data"].([]any)[2])["id"].(string)
	want(t, h.do("POST", "/v1/me/members", `{"email":"o2@example.com","role":"owner"}`, bearer(admin)...), 403, "permission_denied")
	want(t, h.do("PATCH", "/v1/me/members/"+ownerID, `{"role":"viewer"}`, bearer(admin)...), 403, "permission_denied")
	want(t, h.do("DELETE", "/v1/me/members/"+ownerID, "", bearer(admin)...), 403, "permission_denied")
	want(t, h.do("PATCH", "/v1/me/members/"+id, `{"role":"support"}`, bearer(admin)...), 200, "")

	// The last owner stays an owner.
	want(t, h.do("PATCH", "/v1/me/members/"+ownerID, `{"role":"admin"}`, bearer(owner.token)...), 409, "invalid_state")
	want(t, h.do("DELETE", "/v1/me/members/"+ownerID, "", bearer(owner.token)...), 409, "invalid_state")

	// Removing a member ends its sessions at once; it can no longer sign in.
	r = h.do("DELETE", "/v1/me/members/"+adminID, "", bearer(owner.token)...)
	want(t, r, 200, "")
	if r.body["deleted"] != true {
		t.Errorf("removal answers %v", r.body)
	}
	want(t, h.do("GET", "/v1/me", "", bearer(admin)...), 401, "token_revoked")
	want(t, h.do("POST", "/v1/auth/login", `{"email":"admin@example.com","password":"`+matrixPassword+`"}`), 401, "invalid_credentials")
	want(t, h.do("GET", "/v1/me/members/"+adminID, "", bearer(owner.token)...), 404, "not_found")
	var open int
	if err := h.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM sessions WHERE member_id = $1 AND revoked_at IS NULL`, adminID).Scan(&open); err != nil || open != 0 {
		t.Errorf("the removed member has %d open sessions (%v)", open, err)
	}

	// An expired setup link is refused.
	r = h.do("POST", "/v1/me/members", `{"email":"late@example.com","role":"viewer"}`, bearer(owner.token)...)
	want(t, r, 201, "")
	if _, err := h.db.Pool.Exec(context.Background(), `UPDATE members SET setup_expires_at = $1 WHERE email = 'late@example.com'`, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	want(t, h.do("POST", "/v1/auth/setup", `{"token":"`+setupToken(t, r)+`","password":"`+matrixPassword+`"}`), 400, "parameter_invalid")

	// Sign-ins and password setups are in the audit log, by the member.
	for action, actor := range map[string]string{"session.create": id, "member.setup": id, "member.remove": ownerID} {
		r := h.do("GET", "/v1/audit_log?limit=100&action="+action, "", bearer(owner.token)...)
		want(t, r, 200, "")
		found := false
		for _, e := range r.body["data"].([]any) {
			if a := obj(obj(e)["actor"]); a["type"] == "member" && a["id"] == actor {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s entry by %s in %s", action, actor, r.raw)
		}
	}

	// Another merchant's member is not found.
	other := h.account("other@example.com")
	want(t, h.do("GET", "/v1/me/members/"+id, "", bearer(other.token)...), 404, "not_found")
	want(t, h.do("DELETE", "/v1/me/members/"+id, "", bearer(other.token)...), 404, "not_found")
}
