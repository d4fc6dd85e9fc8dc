package e2e

import (
	"net/http"
	"testing"
	"time"
)

// api/openapi.yaml: a token charges "through any
// provider". One token per provider (the sandbox and Stripe, against
// stripe-mock), created with the public key on one replica and charged with
// the secret key on the other; the worker captures each.
// cardToken creates a card token of the card (expiring 12/2031) with the
// public key through base and returns its id.
func (s *stack) cardToken(t *testing.T, c *http.Client, base, publicKey, number string) string {
	t.Helper()
	e, err := sendWith(c, http.MethodPost, base+"/v1/tokens", publicKey,
		`{"card":{"number":"`+number+`","exp_month":12,"exp_year":2031,"cvc":"123"}}`)
	if err != nil {
		t.Fatal(err)
	}
	s.check(t, e)
	mustExpect(t, e, http.StatusCreated, "")
	var token struct {
		ID string `json:"id"`
	}
	decode(t, e, &token)
	return token.ID
}

func TestCardTokenThroughEveryProvider(t *testing.T) {
	parallel(t)
	mock := startStripeMockProcess(t)
	st := newStack(t, stackOptions{env: []string{"STRIPE_SECRET_KEY=sk_test_tokens", "STRIPE_API_BASE=" + mock}}, "tokens")
	c := newClient(t, "127.0.0.46")
	_, session := st.signUp(t, c, "tokens", "Token Shop")
	key := st.newKey(t, c, session, "tokens")
	p := &payments{st: st, c: c, key: key.SecretKey}
	var ids []string
	for _, provider := range []string{"sandbox", "stripe"} {
		token := st.cardToken(t, c, st.replicas[1], key.PublicKey, "4242424242424242")
		e, err := sendWith(c, http.MethodPost, st.replicas[0]+"/v1/charges", key.SecretKey,
			`{"amount":1500,"currency":"usd","payment_method":"card","provider":"`+provider+`","card":{"token":"`+token+`"}}`)
		if err != nil {
			t.Fatal(err)
		}
		st.check(t, e)
		mustExpect(t, e, http.StatusCreated, "")
		var ch chargeJSON
		decode(t, e, &ch)
		ids = append(ids, ch.ID)
	}
	// A card saved from a token is charged through either provider too: the
	// gateway keeps the card, and Stripe receives it as it would a typed one.
	cus := p.do(t, http.MethodPost, "/v1/customers", `{"name":"Saved"}`)
	mustExpect(t, cus, http.StatusCreated, "")
	var customer struct{ ID string }
	decode(t, cus, &customer)
	pmE := p.do(t, http.MethodPost, "/v1/customers/"+customer.ID+"/payment_methods",
		`{"card":{"token":"`+st.cardToken(t, c, st.replicas[1], key.PublicKey, "4242424242424242")+`"}}`)
	mustExpect(t, pmE, http.StatusCreated, "")
	var pm struct{ ID string }
	decode(t, pmE, &pm)
	for _, provider := range []string{"sandbox", "stripe"} {
		e := p.do(t, http.MethodPost, "/v1/charges", `{"amount":1500,"currency":"usd","provider":"`+provider+
			`","customer":"`+customer.ID+`","card":{"payment_method":"`+pm.ID+`"},"off_session":true}`)
		mustExpect(t, e, http.StatusCreated, "")
		var ch chargeJSON
		decode(t, e, &ch)
		ids = append(ids, ch.ID)
	}
	final, _ := p.waitCharges(t, ids, func(_, status string) bool { return status != "created" }, 30*time.Second)
	for i, provider := range []string{"sandbox", "stripe", "sandbox", "stripe"} {
		got := final[ids[i]]
		if got.Status != "captured" || got.Provider != provider || got.AmountCaptured != 1500 || got.ProviderReference == nil ||
			got.Card.Last4 == nil || *got.Card.Last4 != "4242" {
			t.Errorf("%s: the charge of the token or saved card %+v", provider, got)
		}
	}
	checkNoCardData(t, st)
}
