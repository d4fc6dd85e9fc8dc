package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// TestKeysNeverExceedTheirMaker is docs/reliability.md B9 against the real
// binaries: a key never holds more than the role of the member who makes
// it. A developer's session cannot mint a secret key (asked for, or by
// default) nor a restricted key with refunds, charges or connectors write,
// and cannot roll the owner's secret key; nothing is stored and the owner's
// key keeps working. It mints a restricted key within its role, which shows
// created_by and cannot reach connectors, routing or refunds. A restricted
// key with charges write only cannot charge a saved card. Removing the
// developer ends its session but not its key, which the removal's answer
// lists for review and which keeps working on both replicas.
func TestKeysNeverExceedTheirMaker(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{}, "keys never exceed their maker")
	c := newClient(t, "127.0.0.117")
	r1, r2 := st.replicas[0], st.replicas[1]
	merchantID, owner := st.signUp(t, c, "keyrole", "Key Role Shop")
	ownerID := "mem_" + strings.TrimPrefix(merchantID, "mer_")
	ownerKey := st.newKey(t, c, owner, "owner key")

	// A developer joins.
	email := "dev-" + harness.RandomHex(4) + "@example.com"
	e := st.do(t, c, http.MethodPost, r1+"/v1/me/members", owner, fmt.Sprintf(`{"email":%q,"role":"developer"}`, email))
	mustExpect(t, e, http.StatusCreated, "")
	var inv struct {
		Member struct {
			ID string `json:"id"`
		} `json:"member"`
		SetupURL string `json:"setup_url"`
	}
	decode(t, e, &inv)
	u, err := url.Parse(inv.SetupURL)
	if err != nil {
		t.Fatal(err)
	}
	password := "developer password " + harness.RandomHex(4)
	mustExpect(t, st.do(t, c, http.MethodPost, r2+"/v1/auth/setup", "", fmt.Sprintf(`{"token":%q,"password":%q}`, u.Query().Get("token"), password)), http.StatusOK, "")
	dev := st.sessionToken(t, c, email, password)
	devID := inv.Member.ID

	type keyObject struct {
		ID        string  `json:"id"`
		Type      string  `json:"type"`
		SecretKey string  `json:"secret_key"`
		CreatedBy *string `json:"created_by"`
	}
	var list struct {
		Data []keyObject `json:"data"`
	}
	keyCount := func() int {
		t.Helper()
		e := st.do(t, c, http.MethodGet, r1+"/v1/me/api_keys?limit=100", owner, "")
		mustExpect(t, e, http.StatusOK, "")
		decode(t, e, &list)
		return len(list.Data)
	}
	before := keyCount()
	if k := list.Data[0]; k.ID != ownerKey.ID || k.CreatedBy == nil || *k.CreatedBy != ownerID {
		t.Fatalf("the owner's key shows created_by %v, want %s", k.CreatedBy, ownerID)
	}

	// What the developer may not mint or roll, on either replica.
	for i, body := range []string{
		`{"name":"dev key"}`,
		`{"name":"dev key","type":"secret"}`,
		`{"name":"refunder","type":"restricted","permissions":{"refunds":"write"}}`,
		`{"name":"charger","type":"restricted","permissions":{"charges":"write","customers":"read"}}`,
		`{"name":"router","type":"restricted","permissions":{"connectors":"write"}}`,
	} {
		base := st.replicas[i%2]
		mustExpect(t, st.do(t, c, http.MethodPost, base+"/v1/me/api_keys", dev, body), http.StatusForbidden, "permission_denied")
	}
	mustExpect(t, st.do(t, c, http.MethodPost, r2+"/v1/me/api_keys/"+ownerKey.ID+"/roll", dev, `{"expires_in":0}`), http.StatusForbidden, "permission_denied")
	if n := keyCount(); n != before {
		t.Fatalf("%d keys after the refusals, were %d", n, before)
	}
	for _, base := range []string{r1, r2} {
		mustExpect(t, st.do(t, c, http.MethodGet, base+"/v1/charges", ownerKey.SecretKey, ""), http.StatusOK, "")
	}

	// What it may mint: a restricted key within its role, made by it.
	e = st.do(t, c, http.MethodPost, r1+"/v1/me/api_keys", dev,
		`{"name":"hooks","type":"restricted","permissions":{"webhook_endpoints":"write","events":"read","connectors":"read","charges":"read"}}`)
	mustExpect(t, e, http.StatusCreated, "")
	var devKey keyObject
	decode(t, e, &devKey)
	if devKey.Type != "restricted" || devKey.CreatedBy == nil || *devKey.CreatedBy != devID {
		t.Fatalf("the developer's key: %s", e.body)
	}
	e = st.do(t, c, http.MethodGet, r2+"/v1/connectors", devKey.SecretKey, "")
	mustExpect(t, e, http.StatusOK, "")
	var conns struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	decode(t, e, &conns)
	for _, call := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/connectors", `{"provider":"stripe","name":"mine","credentials":{"secret_key":"sk_test_mine"}}`},
		{http.MethodPut, "/v1/routing", fmt.Sprintf(`{"default":{"connectors":[%q]}}`, conns.Data[0].ID)},
		{http.MethodPost, "/v1/refunds", `{"charge":"0190f4b6-3c2a-7d4e-8f00-000000000001","amount":1}`},
	} {
		for _, base := range []string{r1, r2} {
			mustExpect(t, st.do(t, c, call.method, base+call.path, devKey.SecretKey, call.body), http.StatusForbidden, "permission_denied")
		}
	}

	// A saved card needs customers read as well as charges write.
	e = st.do(t, c, http.MethodPost, r1+"/v1/customers", ownerKey.SecretKey, `{"email":"ada@example.com"}`)
	mustExpect(t, e, http.StatusCreated, "")
	var cus struct{ ID string }
	decode(t, e, &cus)
	card := fmt.Sprintf(`{"card":{"number":"4242424242424242","exp_month":12,"exp_year":%d,"cvc":"123"}}`, time.Now().Year()+2)
	e = st.do(t, c, http.MethodPost, r1+"/v1/customers/"+cus.ID+"/payment_methods", ownerKey.SecretKey, card)
	mustExpect(t, e, http.StatusCreated, "")
	var pm struct{ ID string }
	decode(t, e, &pm)
	e = st.do(t, c, http.MethodPost, r2+"/v1/me/api_keys", owner, `{"name":"charges only","type":"restricted","permissions":{"charges":"write"}}`)
	mustExpect(t, e, http.StatusCreated, "")
	var chargesOnly keyObject
	decode(t, e, &chargesOnly)
	saved := fmt.Sprintf(`{"amount":1500,"currency":"usd","customer":%q,"card":{"payment_method":%q},"off_session":true}`, cus.ID, pm.ID)
	for _, base := range []string{r1, r2} {
		mustExpect(t, st.do(t, c, http.MethodPost, base+"/v1/charges", chargesOnly.SecretKey, saved), http.StatusForbidden, "permission_denied")
	}
	e = st.do(t, c, http.MethodGet, r1+"/v1/charges?customer="+cus.ID, ownerKey.SecretKey, "")
	mustExpect(t, e, http.StatusOK, "")
	if strings.Contains(string(e.body), `"object":"charge"`) {
		t.Fatalf("a refused saved-card charge was created: %s", e.body)
	}

	// The developer leaves: its session ends, its key does not, and the
	// removal lists it for review.
	e = st.do(t, c, http.MethodDelete, r2+"/v1/me/members/"+devID, owner, "")
	mustExpect(t, e, http.StatusOK, "")
	var removed struct {
		ID      string `json:"id"`
		Deleted bool   `json:"deleted"`
		APIKeys struct {
			Data []keyObject `json:"data"`
		} `json:"api_keys"`
	}
	decode(t, e, &removed)
	if !removed.Deleted || len(removed.APIKeys.Data) != 1 || removed.APIKeys.Data[0].ID != devKey.ID ||
		removed.APIKeys.Data[0].CreatedBy == nil || *removed.APIKeys.Data[0].CreatedBy != devID {
		t.Fatalf("the removal's keys to review: %s", e.body)
	}
	for _, base := range []string{r1, r2} {
		mustExpect(t, st.do(t, c, http.MethodGet, base+"/v1/me", dev, ""), http.StatusUnauthorized, "token_revoked")
		mustExpect(t, st.do(t, c, http.MethodGet, base+"/v1/events", devKey.SecretKey, ""), http.StatusOK, "")
	}
	e = st.do(t, c, http.MethodGet, r1+"/v1/me/api_keys?created_by="+devID, owner, "")
	mustExpect(t, e, http.StatusOK, "")
	decode(t, e, &list)
	if len(list.Data) != 1 || list.Data[0].ID != devKey.ID {
		t.Fatalf("the developer's keys: %s", e.body)
	}
}
