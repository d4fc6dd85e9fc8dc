package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// TestTeamAcrossReplicas runs the team against the real binaries on two API
// replicas: the owner made by `bin/api merchant create` invites a member on
// replica 1, who sets a password with the setup link's token on replica 2
// and signs in; a role change made on one replica holds on the other from
// the next request; removing the member on replica 2 ends its session on
// replica 1 at once.
func TestTeamAcrossReplicas(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{}, "the team across two replicas")
	c := newClient(t, "127.0.0.1")
	r1, r2 := st.replicas[0], st.replicas[1]
	_, owner := st.signUp(t, c, "owner", "Team Shop")

	email := "dev-" + harness.RandomHex(4) + "@example.com"
	e := st.do(t, c, http.MethodPost, r1+"/v1/me/members", owner, fmt.Sprintf(`{"email":%q,"role":"developer"}`, email))
	mustExpect(t, e, http.StatusCreated, "")
	var inv struct {
		Member struct {
			ID   string `json:"id"`
			Role string `json:"role"`
		} `json:"member"`
		SetupURL string `json:"setup_url"`
	}
	decode(t, e, &inv)
	u, err := url.Parse(inv.SetupURL)
	if err != nil || u.Query().Get("token") == "" || u.Path != "/dashboard/setup" {
		t.Fatalf("setup_url %q", inv.SetupURL)
	}
	// The setup page is served; the token sets the password once.
	page, err := send(c, http.MethodGet, r2+"/dashboard/setup?token="+url.QueryEscape(u.Query().Get("token")), "", "")
	if err != nil || page.status() != http.StatusOK {
		t.Fatalf("the setup page: %v %v", page, err)
	}
	password := "team password " + harness.RandomHex(4)
	body := fmt.Sprintf(`{"token":%q,"password":%q}`, u.Query().Get("token"), password)
	mustExpect(t, st.do(t, c, http.MethodPost, r2+"/v1/auth/setup", "", body), http.StatusOK, "")
	mustExpect(t, st.do(t, c, http.MethodPost, r1+"/v1/auth/setup", "", body), http.StatusBadRequest, "parameter_invalid")

	dev := st.sessionToken(t, c, email, password)
	mustExpect(t, st.do(t, c, http.MethodPost, r2+"/v1/me/api_keys", dev, `{"name":"dev","type":"restricted","permissions":{"events":"read"}}`), http.StatusCreated, "")
	mustExpect(t, st.do(t, c, http.MethodGet, r2+"/v1/me/members", dev, ""), http.StatusForbidden, "permission_denied")

	// Demoted on replica 1: refused on replica 2 at the next request.
	mustExpect(t, st.do(t, c, http.MethodPatch, r1+"/v1/me/members/"+inv.Member.ID, owner, `{"role":"viewer"}`), http.StatusOK, "")
	mustExpect(t, st.do(t, c, http.MethodPost, r2+"/v1/me/api_keys", dev, `{"name":"viewer","type":"restricted"}`), http.StatusForbidden, "permission_denied")
	mustExpect(t, st.do(t, c, http.MethodGet, r2+"/v1/me/api_keys", dev, ""), http.StatusOK, "")

	// Removed on replica 2: its session is refused on both at once.
	mustExpect(t, st.do(t, c, http.MethodDelete, r2+"/v1/me/members/"+inv.Member.ID, owner, ""), http.StatusOK, "")
	for _, base := range []string{r1, r2} {
		mustExpect(t, st.do(t, c, http.MethodGet, base+"/v1/me", dev, ""), http.StatusUnauthorized, "token_revoked")
	}
	login := st.login(t, c, r1, fmt.Sprintf(`{"email":%q,"password":%q}`, email, password))
	mustExpect(t, login, http.StatusUnauthorized, "invalid_credentials")
	// The owner is untouched.
	mustExpect(t, st.do(t, c, http.MethodGet, r1+"/v1/me/members", owner, ""), http.StatusOK, "")
}
