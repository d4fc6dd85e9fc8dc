package httpapi_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
)

// POST /v1/charges takes return_url only as an absolute http or https URL
// with a plain host name or address: anything a header or a policy could
// be built from is refused 400 naming return_url, and nothing is created.
func TestChargeReturnURLRules(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	a := h.account("ret@example.com")
	auth := bearer(a.secret)
	bad := []string{
		"https://*",
		"https://*.example",
		"https://evil.example;sandbox/x",
		"https://evil.example,https://other.example",
		"https://evil.example sandbox",
		"https://evil.example/'x",
		`https://evil.example/"x`,
		"https://evil.example/<x>",
		"javascript:alert(1)",
		"data:text/html,x",
		"ftp://shop.example/",
		"https://user:pw@x.example/",
		"https://user@x.example/",
		"//x.example/done",
		"/done",
		"done",
		"https:/x.example",
		"https:x.example",
		"https://",
		"https://x.example:/",
		"https://x.example:0/",
		"https://x.example:65536/",
		"https://x.example:http/",
		"https://-x.example/",
		"https://x_y.example/",
		"https://x.example/\u00e9",
		"https://x.example/\r\nSet-Cookie:x",
		"https://x.example/\tx",
		"https://x.example/" + strings.Repeat("a", charges.MaxReturnURLLen),
		"",
	}
	before := h.state(t, "")
	for _, u := range bad {
		r := h.with(t).do("POST", "/v1/charges", chargeJSON(set("return_url", u)), auth...)
		if r.status != 400 || r.errCode() != "parameter_invalid" || r.errField("param") != "return_url" {
			t.Errorf("return_url %q: %d %s, want 400 parameter_invalid param return_url", u, r.status, r.raw)
		}
	}
	if diff := stateDiff(before, h.state(t, "")); diff != "" {
		t.Errorf("refused return_urls changed the database: %s", diff)
	}
	for _, u := range []string{
		"https://shop.example/done?x=1",
		"http://127.0.0.1:8080/r",
		"https://SHOP.example:8443/checkout/done?order=7&x=a,b;c#top",
		"http://[::1]:3000/back",
		"https://shop.example./",
	} {
		r := h.createCharge(t, a.secret, chargeJSON(set("return_url", u)))
		if r.body["status"] == nil {
			t.Errorf("return_url %q: %s", u, r.raw)
		}
	}
}

// The challenge pages' Content-Security-Policy is the same constant for
// every charge: no text of the charge's return_url (or of any request)
// enters it, and the form's answer still redirects to the return_url.
func TestChallengePagePolicyIsConstant(t *testing.T) {
	t.Parallel()
	h := newHarness(t, paymentsEnv)
	keys, err := keyring.New(h.cfg.EncryptionKey)
	if err != nil {
		t.Fatal(err)
	}
	w := h.worker(t, &providertest.Fake{AuthorizeFn: func(_ context.Context, r providers.AuthorizeRequest) (providers.Result, error) {
		return providers.Result{Reference: "fake_" + r.IdempotencyKey, Action: &providers.Action{}}, nil
	}})
	w.charges.WithAuthentication(time.Hour, charges.NewLinks(h.cfg.PublicURL, keys),
		func(context.Context, outbox.Task, time.Time) error { return nil })
	a := h.account("csp@example.com")
	const policy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; base-uri 'none'; frame-ancestors *; form-action 'self' http: https:"
	for _, ret := range []string{"https://shop.example/done?x=1", "http://127.0.0.1:8080/r"} {
		id := h.createCharge(t, a.secret, chargeJSON(set("return_url", ret))).body["id"].(string)
		w.authorize(t, id)
		ch := h.do("GET", "/v1/charges/"+id, "", bearer(a.secret)...)
		want200(t, ch)
		link, err := url.Parse(obj(obj(ch.body["next_action"])["redirect_to_url"])["url"].(string))
		if err != nil || !strings.HasPrefix(link.Path, charges.ChallengePath+id+"/") {
			t.Fatalf("next_action of %s: %s", id, ch.raw)
		}
		page := h.do("GET", link.Path, "")
		if page.status != 200 || page.header.Get("Content-Security-Policy") != policy {
			t.Fatalf("challenge page of return_url %s: %d, policy %q, want %q", ret, page.status, page.header.Get("Content-Security-Policy"), policy)
		}
		done := h.doWith(noRedirects, "POST", link.Path, "answer=succeeded", "Content-Type", "application/x-www-form-urlencoded")
		if done.status != 303 || done.header.Get("Content-Security-Policy") != "" && done.header.Get("Content-Security-Policy") != policy {
			t.Fatalf("after the answer (return_url %s): %d, policy %q, want 303 and %q\n%s", ret, done.status,
				done.header.Get("Content-Security-Policy"), policy, done.raw)
		}
		back, err := url.Parse(done.header.Get("Location"))
		if err != nil || back.Scheme+"://"+back.Host+back.Path != strings.Split(ret, "?")[0] || back.Query().Get("charge") != id {
			t.Errorf("the answer sends the cardholder to %q, want %s with charge=%s", done.header.Get("Location"), ret, id)
		}
	}
}

// noRedirects is a client that stops at a redirect, to read its Location.
var noRedirects = &http.Client{Timeout: 15 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func want200(t *testing.T, r response) {
	t.Helper()
	want(t, r, 200, "")
}
