package e2e

import (
	"net/http"
	"testing"
	"time"
)

// CONTRACT.md, "Client-side card collection": a token charges "through any
// provider". One token per provider (the sandbox and Stripe, against
// stripe-mock), created with the public key on one replica and charged with
// the secret key on the other; the worker captures each.
func TestCardTokenThroughEveryProvider(t *testing.T) {
	mock := startStripeMockProcess(t)
	st := newStack(t, stackOptions{env: []string{"STRIPE_SECRET_KEY=sk_test_tokens", "STRIPE_API_BASE=" + mock}}, "tokens")
	c := newClient(t, "127.0.0.46")
	_, session := st.signUp(t, c, "tokens", "Token Shop")
	key := st.newKey(t, c, session, "tokens")
	p := &payments{st: st, c: c, key: key.SecretKey}
	var ids []string
	for _, provider := range []string{"sandbox", "stripe"} {
		tok, err := sendWith(c, http.MethodPost, st.replicas[1]+"/v1/tokens", key.PublicKey,
			`{"card":{"number":"4242424242424242","exp_month":12,"exp_year":2031,"cvc":"123"}}`)
		if err != nil {
			t.Fatal(err)
		}
		st.check(t, tok)
		mustExpect(t, tok, http.StatusCreated, "")
		var token struct {
			ID string `json:"id"`
		}
		decode(t, tok, &token)
		e, err := sendWith(c, http.MethodPost, st.replicas[0]+"/v1/charges", key.SecretKey,
			`{"amount":1500,"currency":"usd","payment_method":"card","provider":"`+provider+`","card":{"token":"`+token.ID+`"}}`)
		if err != nil {
			t.Fatal(err)
		}
		st.check(t, e)
		mustExpect(t, e, http.StatusCreated, "")
		var ch chargeJSON
		decode(t, e, &ch)
		ids = append(ids, ch.ID)
	}
	final, _ := p.waitCharges(t, ids, func(_, status string) bool { return status != "created" }, 30*time.Second)
	for i, provider := range []string{"sandbox", "stripe"} {
		got := final[ids[i]]
		if got.Status != "captured" || got.Provider != provider || got.AmountCaptured != 1500 || got.ProviderReference == nil ||
			got.Card.Last4 == nil || *got.Card.Last4 != "4242" {
			t.Errorf("%s: the token's charge %+v", provider, got)
		}
	}
	checkNoCardData(t, st)
}
