package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// keyJSON is the api_key object with the fields of restricted and rolled
// keys (docs/keys.md).
type keyJSON struct {
	ID          string            `json:"id"`
	Type        string            `json:"type"`
	Permissions map[string]string `json:"permissions"`
	SecretKey   string            `json:"secret_key"`
	Name        string            `json:"name"`
	ExpiresAt   *string           `json:"expires_at"`
	RevokedAt   *string           `json:"revoked_at"`
}

// TestRestrictedAndRolledKeys is docs/keys.md against the real binaries: a
// restricted key does what its permissions grant on both replicas (the
// charge route's cached fast path included) and gets 403 permission_denied
// elsewhere; a rolled key works on both replicas during its overlap and gets
// 401 token_revoked on both once it is over, while the key that replaced it
// works; a key with a bad checksum is 401 invalid_token.
func TestRestrictedAndRolledKeys(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{}, "restricted and rolled keys")
	c := newClient(t, "127.0.0.31")
	_, token := st.signUp(t, c, "keys", "Keys owner")
	_, otherToken := st.signUp(t, c, "keys-other", "Another merchant")
	r0, r1 := st.replicas[0], st.replicas[1]
	charge := func(base, key string) exchange {
		return st.do(t, c, http.MethodPost, base+"/v1/charges", key, cardBody("4242424242424242", true, 1500, "keys"))
	}

	t.Run("restricted key", func(t *testing.T) {
		e := st.do(t, c, http.MethodPost, r1+"/v1/me/api_keys", token,
			`{"name":"charges only","type":"restricted","permissions":{"charges":"write","refunds":"none"}}`)
		mustExpect(t, e, http.StatusCreated, "")
		var k keyJSON
		decode(t, e, &k)
		if k.Type != "restricted" || !strings.HasPrefix(k.SecretKey, "rk_test_") || len(k.SecretKey) != 44 ||
			k.Permissions["charges"] != "write" || k.Permissions["refunds"] != "none" || k.Permissions["customers"] != "none" || k.Permissions["balance"] != "none" || k.Permissions["disputes"] != "none" || len(k.Permissions) != 10 {
			t.Fatalf("restricted key: %s", e.body)
		}
		var chargeID string
		for i, base := range []string{r0, r0, r1, r1} { // the second call on each replica reads the cache
			e := charge(base, k.SecretKey)
			if !expect(t, e, http.StatusCreated, "") {
				t.Fatalf("charge %d with the restricted key", i)
			}
			var ch struct {
				ID string `json:"id"`
			}
			decode(t, e, &ch)
			chargeID = ch.ID
		}
		for _, base := range []string{r0, r1} {
			expect(t, st.do(t, c, http.MethodGet, base+"/v1/charges/"+chargeID, k.SecretKey, ""), http.StatusOK, "")
			expect(t, st.do(t, c, http.MethodPost, base+"/v1/refunds", k.SecretKey, fmt.Sprintf(`{"charge":%q,"amount":100}`, chargeID)),
				http.StatusForbidden, "permission_denied")
			expect(t, st.do(t, c, http.MethodGet, base+"/v1/customers", k.SecretKey, ""), http.StatusForbidden, "permission_denied")
			expect(t, st.do(t, c, http.MethodDelete, base+"/v1/me/api_keys/"+k.ID, k.SecretKey, ""), http.StatusForbidden, "permission_denied")
		}
		// Rolled, a restricted key stays restricted, with the same permissions.
		e = st.do(t, c, http.MethodPost, r0+"/v1/me/api_keys/"+k.ID+"/roll", token, `{"expires_in":0}`)
		mustExpect(t, e, http.StatusCreated, "")
		var next keyJSON
		decode(t, e, &next)
		if next.Type != "restricted" || !strings.HasPrefix(next.SecretKey, "rk_test_") || next.Name != "charges only" || next.Permissions["charges"] != "write" || next.Permissions["refunds"] != "none" {
			t.Fatalf("the rolled restricted key: %s", e.body)
		}
		for _, base := range []string{r0, r1} {
			expect(t, charge(base, k.SecretKey), http.StatusUnauthorized, "token_revoked")
			expect(t, charge(base, next.SecretKey), http.StatusCreated, "")
			expect(t, st.do(t, c, http.MethodGet, base+"/v1/customers", next.SecretKey, ""), http.StatusForbidden, "permission_denied")
		}
		for body, param := range map[string]string{
			`{"type":"admin"}`: "type",
			`{"type":"restricted","permissions":{"payouts":"read"}}`:  "permissions.payouts",
			`{"type":"restricted","permissions":{"charges":"admin"}}`: "permissions.charges",
			`{"permissions":{"charges":"read"}}`:                      "permissions",
		} {
			e := st.do(t, c, http.MethodPost, r0+"/v1/me/api_keys", token, body)
			if expect(t, e, http.StatusBadRequest, "parameter_invalid") && !strings.Contains(string(e.body), fmt.Sprintf(`"param":%q`, param)) {
				t.Errorf("%s: want param %s: %s", body, param, e.body)
			}
		}
	})

	t.Run("rolled key", func(t *testing.T) {
		old := st.newKey(t, c, token, "rolled")
		for _, base := range []string{r0, r1} { // both replicas have it cached
			expect(t, charge(base, old.SecretKey), http.StatusCreated, "")
		}
		expect(t, st.do(t, c, http.MethodPost, r0+"/v1/me/api_keys/"+old.ID+"/roll", otherToken, `{"expires_in":2}`), http.StatusNotFound, "not_found")
		expect(t, st.do(t, c, http.MethodPost, r0+"/v1/me/api_keys/"+old.ID+"/roll", token, `{"expires_in":604801}`), http.StatusBadRequest, "parameter_invalid")
		expect(t, st.do(t, c, http.MethodPost, r0+"/v1/me/api_keys/"+old.ID+"/roll", old.SecretKey, `{"expires_in":2}`), http.StatusUnauthorized, "invalid_token_type")

		// Five seconds of overlap: room for the six requests below on a loaded machine.
		e := st.do(t, c, http.MethodPost, r1+"/v1/me/api_keys/"+old.ID+"/roll", token, `{"expires_in":5}`)
		mustExpect(t, e, http.StatusCreated, "")
		var next keyJSON
		decode(t, e, &next)
		if next.Type != "secret" || !strings.HasPrefix(next.SecretKey, "sk_test_") || len(next.SecretKey) != 44 || next.Name != "rolled" || next.ID == old.ID {
			t.Fatalf("the new key: %s", e.body)
		}
		var listed struct {
			Data []keyJSON `json:"data"`
		}
		decode(t, st.do(t, c, http.MethodGet, r0+"/v1/me/api_keys?limit=100", token, ""), &listed)
		var expiresAt time.Time
		for _, k := range listed.Data {
			if k.ID == old.ID && k.ExpiresAt != nil && k.RevokedAt == nil {
				expiresAt, _ = time.Parse(time.RFC3339, *k.ExpiresAt)
			}
		}
		if expiresAt.IsZero() {
			t.Fatalf("the old key has no expires_at in the list: %+v", listed.Data)
		}
		// During the overlap, both work. The old key's answers are judged by
		// when they came: one that came before its expiry was decided before
		// it and must succeed; on a loaded machine a request may reach past
		// the expiry, and then token_revoked is right too.
		judged := 0
		during := func(e exchange, want int) {
			t.Helper()
			if e.end.Before(expiresAt) {
				judged++
				expect(t, e, want, "")
			} else if e.status() != want {
				expect(t, e, http.StatusUnauthorized, "token_revoked")
			}
		}
		for _, base := range []string{r0, r1} {
			during(charge(base, old.SecretKey), http.StatusCreated)
			during(st.do(t, c, http.MethodGet, base+"/v1/charges?limit=1", old.SecretKey, ""), http.StatusOK)
			expect(t, charge(base, next.SecretKey), http.StatusCreated, "")
		}
		if judged == 0 {
			t.Logf("no request with the old key was answered before its expiry at %s: the overlap was not seen", expiresAt.Format(time.RFC3339Nano))
		}
		expect(t, st.do(t, c, http.MethodPost, r0+"/v1/me/api_keys/"+old.ID+"/roll", token, `{"expires_in":2}`), http.StatusConflict, "invalid_state")
		time.Sleep(time.Until(expiresAt) + 50*time.Millisecond)
		for _, base := range []string{r0, r1} { // after it, the old key is refused everywhere
			expect(t, charge(base, old.SecretKey), http.StatusUnauthorized, "token_revoked")
			expect(t, st.do(t, c, http.MethodGet, base+"/v1/charges?limit=1", old.SecretKey, ""), http.StatusUnauthorized, "token_revoked")
			expect(t, charge(base, next.SecretKey), http.StatusCreated, "")
		}
	})

	t.Run("bad checksum", func(t *testing.T) {
		k := st.newKey(t, c, token, "checksum")
		last := k.SecretKey[len(k.SecretKey)-1]
		bad := k.SecretKey[:len(k.SecretKey)-1] + map[bool]string{true: "b", false: "a"}[last == 'a']
		for _, base := range []string{r0, r1} {
			expect(t, charge(base, k.SecretKey), http.StatusCreated, "")
			expect(t, charge(base, bad), http.StatusUnauthorized, "invalid_token")
			expect(t, st.do(t, c, http.MethodGet, base+"/v1/charges", bad, ""), http.StatusUnauthorized, "invalid_token")
		}
	})
}
