package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/mfa"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// TestMemberEmailsPerMerchant runs member emails, unique per merchant
// (docs/team.md), and the cap of a two-factor challenge against the real
// binaries on two replicas: merchant A invites the owner of merchant B and
// gets the answer any invitation gets, nothing of B; the person, with the
// same password in both, must choose the merchant at sign-in, is offered B
// and A and nothing else, and signs in to each by naming it;
// `bin/api merchant create` takes the email of a member of another
// merchant; 60 wrong codes sent at once to both replicas against one
// challenge check at most 5, and the right code is then refused too.
func TestMemberEmailsPerMerchant(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{apiEnv: []string{"RATE_LIMIT_LOGIN=1000/5m", "RATE_LIMIT_LOGIN_ACCOUNT=1000/15m"}},
		"member emails per merchant, the two-factor challenge's cap")
	c := newClient(t, "127.0.0.1")
	r1, r2 := st.replicas[0], st.replicas[1]
	aID, aToken := st.signUp(t, c, "a-owner", "Shop A")
	bEmail, bPassword := "b-owner-"+harness.RandomHex(4)+"@example.com", "b owner password "+harness.RandomHex(4)
	bID := st.createMerchant(t, bEmail, bPassword, "Shop B")

	// A invites B's owner: the answer of any invitation, nothing of B.
	invite := func(email, role string) (exchange, string) {
		t.Helper()
		e := st.do(t, c, http.MethodPost, r1+"/v1/me/members", aToken, fmt.Sprintf(`{"email":%q,"role":%q}`, email, role))
		mustExpect(t, e, http.StatusCreated, "")
		var inv struct {
			SetupURL string `json:"setup_url"`
		}
		decode(t, e, &inv)
		u, err := url.Parse(inv.SetupURL)
		if err != nil || u.Query().Get("token") == "" {
			t.Fatalf("setup_url %q", inv.SetupURL)
		}
		return e, u.Query().Get("token")
	}
	shape := func(e exchange) []string {
		t.Helper()
		var body map[string]json.RawMessage
		var member map[string]any
		decode(t, e, &body)
		if err := json.Unmarshal(body["member"], &member); err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		return append(slices.Sorted(maps.Keys(body)), slices.Sorted(maps.Keys(member))...)
	}
	ofB, bSetup := invite(strings.ToUpper(bEmail), "developer")
	fresh, _ := invite("fresh-"+harness.RandomHex(4)+"@example.com", "developer")
	if !slices.Equal(shape(ofB), shape(fresh)) || strings.Contains(string(ofB.body), strings.TrimPrefix(bID, "mer_")) {
		t.Fatalf("the invitation of B's owner differs from any other:\n%s\n%s", ofB.body, fresh.body)
	}
	mustExpect(t, st.do(t, c, http.MethodPost, r2+"/v1/me/members", aToken, fmt.Sprintf(`{"email":%q,"role":"viewer"}`, bEmail)),
		http.StatusBadRequest, "parameter_invalid")

	// The person sets the same password in A as in B: signing in must
	// choose, between B and A only, and signs in to each one named.
	mustExpect(t, st.do(t, c, http.MethodPost, r2+"/v1/auth/setup", "", fmt.Sprintf(`{"token":%q,"password":%q}`, bSetup, bPassword)), http.StatusOK, "")
	both := fmt.Sprintf(`{"email":%q,"password":%q}`, bEmail, bPassword)
	e := st.login(t, c, r2, both)
	mustExpect(t, e, http.StatusBadRequest, "parameter_missing")
	var choice struct {
		Error struct {
			Param     string `json:"param"`
			Merchants []struct {
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"merchants"`
		} `json:"error"`
	}
	decode(t, e, &choice)
	var offered []string
	for _, m := range choice.Error.Merchants {
		offered = append(offered, m.ID+" "+m.Name)
	}
	if want := []string{bID + " Shop B", aID + " Shop A"}; choice.Error.Param != "merchant" || !slices.Equal(offered, want) {
		t.Fatalf("the choice: param %q, merchants %q; want merchant, %q", choice.Error.Param, offered, want)
	}
	sessionOf := func(base, merchantID string) string {
		t.Helper()
		e := st.login(t, c, base, fmt.Sprintf(`{"email":%q,"password":%q,"merchant":%q}`, bEmail, bPassword, merchantID))
		mustExpect(t, e, http.StatusOK, "")
		var s struct {
			Token    string `json:"token"`
			Merchant struct {
				ID string `json:"id"`
			} `json:"merchant"`
		}
		decode(t, e, &s)
		if s.Merchant.ID != merchantID || s.Token == "" {
			t.Fatalf("signed in to %q, want %s: %s", s.Merchant.ID, merchantID, e.body)
		}
		return s.Token
	}
	sessionOf(r1, aID)
	bToken := sessionOf(r2, bID)

	// `bin/api merchant create` takes the email of a member of another
	// merchant, and of an owner of one.
	dEmail, dPassword := "d-"+harness.RandomHex(4)+"@example.com", "d owner password "+harness.RandomHex(4)
	invite(dEmail, "viewer")
	dID := st.createMerchant(t, dEmail, dPassword, "Shop D")
	e = st.login(t, c, r1, fmt.Sprintf(`{"email":%q,"password":%q}`, dEmail, dPassword))
	mustExpect(t, e, http.StatusOK, "")
	if !strings.Contains(string(e.body), dID) {
		t.Fatalf("D's owner signed in elsewhere: %s", e.body)
	}
	st.createMerchant(t, bEmail, "b's third account "+harness.RandomHex(4), "Shop E")

	// Two-factor sign-in on B's membership; 60 wrong codes at once on both
	// replicas against one challenge check at most 5.
	e = st.do(t, c, http.MethodPost, r1+"/v1/me/mfa/totp", bToken, "")
	mustExpect(t, e, http.StatusOK, "")
	var enrollment struct {
		Secret string `json:"secret"`
	}
	decode(t, e, &enrollment)
	code := func(offset int64) string {
		t.Helper()
		c, err := mfa.Code(enrollment.Secret, mfa.Step(time.Now())+offset)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	mustExpect(t, st.do(t, c, http.MethodPost, r2+"/v1/me/mfa/totp/confirm", bToken, fmt.Sprintf(`{"code":%q}`, code(-1))), http.StatusOK, "")
	e = st.login(t, c, r1, fmt.Sprintf(`{"email":%q,"password":%q,"merchant":%q}`, bEmail, bPassword, bID))
	challenge := challengeIn(t, e)
	wrong := "000000"
	for offset := int64(-2); offset <= 2; offset++ {
		if code(offset) == wrong {
			wrong = "999999"
		}
	}
	const n = 60
	answers := make([]exchange, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = send(c, http.MethodPost, st.replicas[i%2]+"/v1/auth/mfa", "", fmt.Sprintf(`{"challenge":%q,"code":%q}`, challenge, wrong))
		})
	}
	close(start)
	wg.Wait()
	got := map[string]int{}
	for i, e := range answers {
		if errs[i] != nil {
			t.Fatalf("a wrong code: %v", errs[i])
		}
		st.check(t, e)
		got[fmt.Sprintf("%d %s", e.status(), e.code())]++
	}
	t.Logf("%d wrong codes at once against one challenge on two replicas: %v", n, got)
	if got["401 invalid_credentials"] > mfa.ChallengeFailures || got["401 invalid_credentials"]+got["401 invalid_token"] != n {
		t.Errorf("%d wrong codes at once: %v; want at most %d checked (invalid_credentials), the rest refused (invalid_token)",
			n, got, mfa.ChallengeFailures)
	}
	expect(t, st.do(t, c, http.MethodPost, r2+"/v1/auth/mfa", "", fmt.Sprintf(`{"challenge":%q,"code":%q}`, challenge, code(0))),
		http.StatusUnauthorized, "invalid_token")
}

// challengeIn is the challenge of a sign-in whose second step is due:
// 401 mfa_required, the challenge in the error object (login's 200 is only
// ever a session).
func challengeIn(t *testing.T, e exchange) string {
	t.Helper()
	mustExpect(t, e, http.StatusUnauthorized, "mfa_required")
	var b struct {
		Token string `json:"token"`
		Error struct {
			Challenge string `json:"challenge"`
		} `json:"error"`
	}
	decode(t, e, &b)
	if c := b.Error.Challenge; strings.HasPrefix(c, "mfa_") && b.Token == "" {
		return c
	}
	t.Fatalf("no two-factor challenge in %s", e)
	return ""
}
