package httpapi_test

import (
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/httpapi"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
)

// TestEveryRouteHasANeed: the authorization table has a row for every
// route that authenticates a member or a key, and no row for a route the
// app does not serve. A route without a row is refused to everyone.
func TestEveryRouteHasANeed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv)
	needs := httpapi.Needs()
	seen := map[string]bool{}
	for _, key := range append(served(h), dashboardServed(h)...) {
		seen[key] = true
		if _, ok := needs[key]; ok {
			continue
		}
		if r, ok := authzRoutes[key]; ok && (r.auth == public || r.auth == publicKeyOnly) {
			continue
		}
		if r, ok := dashRoutes[key]; ok && r.public {
			continue
		}
		t.Errorf("%s authenticates but has no row in the authorization table (internal/httpapi/authorization.go)", key)
	}
	for key := range needs {
		if !seen[key] {
			t.Errorf("the authorization table has a row for %s, which the app does not serve", key)
		}
	}
}

// TestRoleMatrix is the role axis of the authorization matrix, generated
// from the authorization table: every route and dashboard action, called by
// a member of every role, answers 403 permission_denied exactly when the
// role does not grant what the table says the route needs. Calls name ids
// that exist nowhere (or send bodies that are refused), so an allowed call
// reaches the handler and answers 404 or 400 without changing anything; a
// route that takes only secret keys refuses every member's session alike.
func TestRoleMatrix(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv)
	owner := h.newAuthzFixture(t, "owner@example.com", h.worker(t, &providertest.Fake{}), h.deliverer(t, &recordingSender{status: 500}), 1)
	// A member of every role, signed in through the invitation's setup link.
	emails := map[string]string{authz.Owner: owner.email}
	for _, role := range authz.Roles[1:] {
		email := role + "@example.com"
		r := h.do("POST", "/v1/me/members", `{"email":"`+email+`","role":"`+role+`"}`, bearer(owner.token)...)
		want(t, r, 201, "")
		setup, err := url.Parse(r.body["setup_url"].(string))
		if err != nil {
			t.Fatal(err)
		}
		r = h.do("POST", "/v1/auth/setup", `{"token":"`+setup.Query().Get("token")+`","password":"`+matrixPassword+`"}`)
		want(t, r, 200, "")
		if got := r.body["role"]; got != role {
			t.Fatalf("set up %s: role %v", email, got)
		}
		emails[role] = email
	}
	unknownID := func(kind string) string { return unknownIDOf(owner, kind) }

	// One session per role, on the API and on the dashboard, for every
	// route but the ones that sign out, which get a session of their own:
	// no other call of the matrix ends a session (a call that did would
	// make the next ones answer 401, which fails the test).
	apiSessions, dashSessions := map[string]string{}, map[string]*dashClient{}
	apiSession := func(role string, ends bool) string {
		if s, ok := apiSessions[role]; ok && !ends {
			return s
		}
		s := h.login(emails[role], matrixPassword)
		if !ends {
			apiSessions[role] = s
		}
		return s
	}
	dashSession := func(role string, ends bool) *dashClient {
		if d, ok := dashSessions[role]; ok && !ends {
			return d
		}
		d := h.dashClientSignedIn(t, emails[role])
		if !ends {
			dashSessions[role] = d
		}
		return d
	}

	needs, keys := sortedNeeds()
	var allowed, denied, keyOnlyRefused int
	for _, key := range keys {
		need := needs[key]
		for _, role := range authz.Roles {
			may := authz.RolePermissions(role).Allows(need.Resource, need.Access)
			ends := strings.HasPrefix(key, "POST /dashboard/logout") || key == "DELETE /v1/auth/logout"
			if ends {
				may = true // signing out: checked with a session of its own
			}
			var status int
			var code, body string
			if route, ok := dashRoutes[key]; ok {
				d := dashSession(role, ends)
				id := ""
				if route.idKind != "" {
					id = unknownID(route.idKind)
				}
				m, p := dashRoutePath(key, id)
				var page dashPage
				if m == "GET" {
					page = d.get(p)
				} else {
					page = d.post(p, route.matrixForm)
				}
				status, body = page.status, page.body
				if strings.Contains(body, "permission_denied") {
					code = "permission_denied"
				}
			} else {
				route, ok := authzRoutes[key]
				if !ok {
					t.Fatalf("%s: in the authorization table but not in authzRoutes", key)
				}
				session := apiSession(role, ends)
				id := ""
				if route.idKind != "" {
					id = unknownID(route.idKind)
				}
				m, p, b := route.request(key, owner, id)
				r := h.with(t).do(m, p, b, bearer(session)...)
				status, code, body = r.status, r.errCode(), string(r.raw)
				if !route.auth.session() {
					if status != 401 || code != "invalid_token_type" {
						t.Errorf("%s as %s: %d %s, want 401 invalid_token_type (the route takes secret keys only)", key, role, status, body)
					}
					keyOnlyRefused++
					continue
				}
			}
			switch {
			case !may && (status != 403 || code != "permission_denied"):
				t.Errorf("%s as %s (needs %s %s): %d, want 403 permission_denied\n%.300s", key, role, need.Access, need.Resource, status, body)
			case may && (code == "permission_denied" || status == 401):
				t.Errorf("%s as %s (needs %s %s): %d %s, want it allowed\n%.300s", key, role, need.Access, need.Resource, status, code, body)
			case may:
				allowed++
			default:
				denied++
			}
		}
	}
	t.Logf("role matrix: %d routes x %d roles: %d allowed, %d denied permission_denied, %d refused as key-only", len(keys), len(authz.Roles), allowed, denied, keyOnlyRefused)
}

// TestRestrictedKeyMatrix is the restricted-key axis of the authorization
// matrix, generated from the same table: every route that takes a secret
// key, called with a restricted key granting exactly what the route needs,
// gets past authorization; with one level less on that resource it answers
// 403 permission_denied. As in TestRoleMatrix, ids exist nowhere, so allowed
// calls change nothing.
func TestRestrictedKeyMatrix(t *testing.T) {
	t.Parallel()
	h := newHarness(t, authzEnv)
	owner := h.newAuthzFixture(t, "keys@example.com", h.worker(t, &providertest.Fake{}), h.deliverer(t, &recordingSender{status: 500}), 1)
	keyOf := map[string]string{} // "resource=level" -> rk_test_ secret
	restricted := func(r authz.Resource, a authz.Access) string {
		name := string(r) + "=" + a.String()
		if k, ok := keyOf[name]; ok {
			return k
		}
		perms := `{}`
		if r != "" {
			perms = `{"` + string(r) + `":"` + a.String() + `"}`
		}
		resp := h.do("POST", "/v1/me/api_keys", `{"type":"restricted","name":"`+name+`","permissions":`+perms+`}`, bearer(owner.token)...)
		want(t, resp, 201, "")
		keyOf[name] = resp.body["secret_key"].(string)
		return keyOf[name]
	}
	unknownID := func(kind string) string { return unknownIDOf(owner, kind) }
	needs, keys := sortedNeeds()
	var allowed, denied int
	for _, key := range keys {
		route, ok := authzRoutes[key]
		if !ok || !route.auth.key() {
			continue
		}
		need := needs[key]
		id := ""
		if route.idKind != "" {
			id = unknownID(route.idKind)
		}
		call := func(secret string) response {
			m, p, b := route.request(key, owner, id)
			return h.with(t).do(m, p, b, bearer(secret)...)
		}
		if !route.stream { // an allowed stream does not end: TestEventStream's
			r := call(restricted(need.Resource, need.Access))
			if r.errCode() == "permission_denied" || r.status == 401 {
				t.Errorf("%s with a key granting %s %s: %d %s, want it allowed", key, need.Resource, need.Access, r.status, r.raw)
			}
			allowed++
		}
		if need.Resource == "" {
			continue // every key may
		}
		r := call(restricted(need.Resource, need.Access-1))
		if r.status != 403 || r.errCode() != "permission_denied" {
			t.Errorf("%s with a key granting %s %s: %d %s, want 403 permission_denied", key, need.Resource, need.Access-1, r.status, r.raw)
		}
		denied++
	}
	if allowed < 30 || denied < 30 {
		t.Errorf("only %d allowed and %d denied calls: the matrix lost its routes", allowed, denied)
	}
	t.Logf("restricted key matrix: %d routes allowed with their need, %d refused one level below", allowed, denied)
}

// unknownIDOf is an id of the kind that exists nowhere: f's first object's,
// its end changed.
func unknownIDOf(f *authzFixture, kind string) string {
	if !prefixedKinds[kind] {
		return uuid.Must(uuid.NewV7()).String()
	}
	id := f.ids[kind][0]
	return id[:len(id)-6] + "000000"
}

// sortedNeeds is the authorization table and its routes in order.
func sortedNeeds() (map[string]authz.Need, []string) {
	needs := httpapi.Needs()
	keys := make([]string, 0, len(needs))
	for k := range needs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return needs, keys
}
