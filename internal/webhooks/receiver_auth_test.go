package webhooks_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// endpointStore keeps the endpoints the service writes, in memory.
type endpointStore struct {
	webhooks.Store // other methods are not used here: calling one panics
	endpoints      map[string]webhooks.Endpoint
}

func (s *endpointStore) CreateEndpoint(_ context.Context, e webhooks.Endpoint, _ *idempotency.Request, _ idempotency.Response) (*idempotency.Response, error) {
	s.endpoints[e.ID] = e
	return nil, nil
}

func (s *endpointStore) EndpointByID(_ context.Context, _, id string) (webhooks.Endpoint, error) {
	e, ok := s.endpoints[id]
	if !ok {
		return webhooks.Endpoint{}, apperr.NotFound("webhook_endpoint")
	}
	return e, nil
}

// UpdateEndpoint applies the receiver part of a patch (and the URL).
func (s *endpointStore) UpdateEndpoint(_ context.Context, _, id string, p webhooks.Patch) (webhooks.Endpoint, error) {
	e := s.endpoints[id]
	if p.URL != nil {
		e.URL = *p.URL
	}
	if p.SetAuth {
		e.Auth, e.AuthSecretSealed = p.Auth, p.AuthSecretSealed
	}
	if p.SetHeaders {
		e.HeaderNames, e.HeadersSealed = p.HeaderNames, p.HeadersSealed
	}
	s.endpoints[id] = e
	return e, nil
}

func receiverService(t *testing.T) (*webhooks.Service, *endpointStore, *keyring.Keyring) {
	t.Helper()
	keys, err := keyring.New(bytes.Repeat([]byte{0x5a}, 32))
	if err != nil {
		t.Fatal(err)
	}
	st := &endpointStore{endpoints: map[string]webhooks.Endpoint{}}
	return webhooks.NewService(st, nil, keys, false, time.Now, nil), st, keys
}

func createWith(t *testing.T, s *webhooks.Service, body string) (webhooks.Endpoint, error) {
	t.Helper()
	var p webhooks.CreateParams
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	var got webhooks.Endpoint
	_, err := s.Create(context.Background(), "mer_1", "sandbox", p, nil, func(e webhooks.Endpoint, _ string) (idempotency.Response, error) {
		got = e
		return idempotency.Response{}, nil
	})
	return got, err
}

const oauth2Auth = `{"type":"oauth2_client_credentials","token_url":"https://auth.example.com/token","client_id":"gh","client_secret":"s3cret-value","scopes":["hooks.write"]}`

func invalid(t *testing.T, err error, param string) {
	t.Helper()
	var ae *apperr.Error
	if !errors.As(err, &ae) || ae.Kind != apperr.KindInvalid || ae.Param != param {
		t.Fatalf("err = %v, want 400 naming %q", err, param)
	}
	if strings.Contains(ae.Message, "s3cret-value") {
		t.Errorf("the message repeats the secret: %q", ae.Message)
	}
}

// TestReceiverAuthValidation: every bad auth or headers value is a 400
// naming the field, checked before anything is stored.
func TestReceiverAuthValidation(t *testing.T) {
	t.Parallel()
	s, _, _ := receiverService(t)
	withAuth := func(auth string) string {
		return `{"url":"https://hooks.example.com/x","events":["charge.created"],"auth":` + auth + `}`
	}
	withHeaders := func(auth, headers string) string {
		return `{"url":"https://hooks.example.com/x","events":["charge.created"],"auth":` + auth + `,"headers":` + headers + `}`
	}
	many := map[string]string{}
	for i := range 11 {
		many[fmt.Sprintf("X-H%d", i)] = "v"
	}
	manyJSON, _ := json.Marshal(many)
	for _, tc := range []struct{ name, body, param string }{
		{"auth not an object", withAuth(`"mtls"`), "auth"},
		{"unknown auth field", withAuth(`{"type":"mtls","extra":1}`), "auth"},
		{"no type", withAuth(`{}`), "auth.type"},
		{"unknown type", withAuth(`{"type":"basic"}`), "auth.type"},
		{"mtls with oauth2 fields", withAuth(`{"type":"mtls","client_id":"x"}`), "auth"},
		{"mtls on http", `{"url":"http://hooks.example.com/x","events":["charge.created"],"auth":{"type":"mtls"}}`, "auth.type"},
		{"no token_url", withAuth(`{"type":"oauth2_client_credentials","client_id":"a","client_secret":"s3cret-value"}`), "auth.token_url"},
		{"token_url not http", withAuth(strings.Replace(oauth2Auth, "https://auth.example.com/token", "ftp://auth.example.com/token", 1)), "auth.token_url"},
		{"token_url private", withAuth(strings.Replace(oauth2Auth, "https://auth.example.com/token", "http://10.0.0.7/token", 1)), "auth.token_url"},
		{"token_url localhost", withAuth(strings.Replace(oauth2Auth, "https://auth.example.com/token", "http://localhost/token", 1)), "auth.token_url"},
		{"token_url with credentials", withAuth(strings.Replace(oauth2Auth, "https://auth.example.com", "https://u:p@auth.example.com", 1)), "auth.token_url"},
		{"no client_id", withAuth(strings.Replace(oauth2Auth, `"client_id":"gh",`, "", 1)), "auth.client_id"},
		{"client_id too long", withAuth(strings.Replace(oauth2Auth, `"gh"`, `"`+strings.Repeat("a", 257)+`"`, 1)), "auth.client_id"},
		{"no client_secret", withAuth(strings.Replace(oauth2Auth, `,"client_secret":"s3cret-value"`, "", 1)), "auth.client_secret"},
		{"client_secret with a newline", withAuth(strings.Replace(oauth2Auth, `s3cret-value`, `s3cret-value\n`, 1)), "auth.client_secret"},
		{"client_secret too long", withAuth(strings.Replace(oauth2Auth, `s3cret-value`, strings.Repeat("s", 1025), 1)), "auth.client_secret"},
		{"scope with a space", withAuth(strings.Replace(oauth2Auth, `"hooks.write"`, `"hooks write"`, 1)), "auth.scopes"},
		{"scopes not strings", withAuth(strings.Replace(oauth2Auth, `["hooks.write"]`, `[1]`, 1)), "auth.scopes"},
		{"headers not an object", withHeaders("null", `["X-A"]`), "headers"},
		{"11 headers", withHeaders("null", string(manyJSON)), "headers"},
		{"header name not a token", withHeaders("null", `{"X A":"v"}`), "headers.X A"},
		{"header value with CRLF", withHeaders("null", `{"X-A":"v\r\nX-Injected: 1"}`), "headers.X-A"},
		{"header value with NUL", withHeaders("null", `{"X-A":"v\u0000"}`), "headers.X-A"},
		{"header value too long", withHeaders("null", `{"X-A":"`+strings.Repeat("v", 1025)+`"}`), "headers.X-A"},
		{"header value not a string", withHeaders("null", `{"X-A":1}`), "headers.X-A"},
		{"Content-Type", withHeaders("null", `{"content-type":"text/plain"}`), "headers.content-type"},
		{"Host", withHeaders("null", `{"Host":"evil.example"}`), "headers.Host"},
		{"User-Agent", withHeaders("null", `{"User-Agent":"x"}`), "headers.User-Agent"},
		{"X-Service-", withHeaders("null", `{"x-service-signature":"sha256=00"}`), "headers.x-service-signature"},
		{"webhook-", withHeaders("null", `{"Webhook-Id":"msg_1"}`), "headers.Webhook-Id"},
		{"Authorization with oauth2", withHeaders(oauth2Auth, `{"Authorization":"Basic eA=="}`), "headers.Authorization"},
		{"the same name twice", withHeaders("null", `{"X-A":"1","x-a":"2"}`), "headers.x-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := createWith(t, s, tc.body)
			invalid(t, err, tc.param)
		})
	}
}

// TestReceiverAuthStoredSealed: the client secret and header values are
// stored sealed to the endpoint, and the public form never shows them.
func TestReceiverAuthStoredSealed(t *testing.T) {
	t.Parallel()
	s, _, keys := receiverService(t)
	e, err := createWith(t, s, `{"url":"https://hooks.example.com/x","events":["charge.created"],"auth":`+oauth2Auth+
		`,"headers":{"X-Api-Key":"key-value-1","Authorization-Extra":"x"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if e.Auth == nil || e.Auth.TokenURL != "https://auth.example.com/token" || e.Auth.ClientID != "gh" || len(e.Auth.Scopes) != 1 {
		t.Fatalf("auth = %+v", e.Auth)
	}
	for what, sealed := range map[string][]byte{"secret": e.AuthSecretSealed, "headers": e.HeadersSealed} {
		if bytes.Contains(sealed, []byte("s3cret-value")) || bytes.Contains(sealed, []byte("key-value-1")) {
			t.Errorf("%s stored in clear", what)
		}
	}
	stored, _ := json.Marshal(e.Auth)
	view, _ := json.Marshal(e.View())
	for what, b := range map[string][]byte{"stored auth": stored, "view": view} {
		if bytes.Contains(b, []byte("s3cret-value")) || bytes.Contains(b, []byte("key-value-1")) {
			t.Errorf("%s shows a secret: %s", what, b)
		}
	}
	var v struct {
		Auth    map[string]any    `json:"auth"`
		Headers map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(view, &v); err != nil {
		t.Fatal(err)
	}
	if v.Auth["type"] != webhooks.AuthOAuth2 || v.Auth["client_id"] != "gh" || v.Auth["token_url"] != "https://auth.example.com/token" {
		t.Errorf("view auth = %v", v.Auth)
	}
	if _, ok := v.Auth["client_secret"]; ok {
		t.Errorf("view auth has client_secret: %v", v.Auth)
	}
	if len(v.Headers) != 2 || v.Headers["X-Api-Key"] != webhooks.HeaderMask {
		t.Errorf("view headers = %v", v.Headers)
	}
	// Sealed to this endpoint: another's id does not open them.
	if _, err := keys.Open(keyring.PurposeWebhook, e.AuthSecretSealed, keyring.AssociatedData("webhook endpoint oauth2 client secret", "we_other")); err == nil {
		t.Error("the client secret opens for another endpoint")
	}
	got, err := keys.Open(keyring.PurposeWebhook, e.AuthSecretSealed, keyring.AssociatedData("webhook endpoint oauth2 client secret", e.ID))
	if err != nil || string(got) != "s3cret-value" {
		t.Errorf("opened secret = %q, %v", got, err)
	}

	m, err := createWith(t, s, `{"url":"https://hooks.example.com/y","events":["charge.created"],"auth":{"type":"mtls"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if mv, _ := json.Marshal(m.View()); !bytes.Contains(mv, []byte(`"auth":{"type":"mtls"},"headers":{}`)) {
		t.Errorf("mtls view = %s", mv)
	}
}

// TestReceiverAuthPatch: null removes the auth, {} clears the headers, an
// absent field keeps its value, and the combination with what the endpoint
// keeps is checked.
func TestReceiverAuthPatch(t *testing.T) {
	t.Parallel()
	s, st, _ := receiverService(t)
	e, err := createWith(t, s, `{"url":"https://hooks.example.com/x","events":["charge.created"],"auth":{"type":"mtls"},"headers":{"Authorization":"Basic eA=="}}`)
	if err != nil {
		t.Fatal(err)
	}
	patch := func(body string) (webhooks.Endpoint, error) {
		var p webhooks.UpdateParams
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		return s.Update(context.Background(), "mer_1", e.ID, p)
	}
	_, err = patch(`{"url":"http://hooks.example.com/x"}`)
	invalid(t, err, "url")
	_, err = patch(`{"auth":` + oauth2Auth + `}`)
	invalid(t, err, "auth.type") // the endpoint's own Authorization header is in the way
	got, err := patch(`{"description":"only this"}`)
	if err != nil || got.Auth == nil || got.Auth.Type != webhooks.AuthMTLS || len(st.endpoints[e.ID].HeaderNames) != 1 {
		t.Fatalf("a patch without auth or headers changed them: %+v, %v", got, err)
	}
	got, err = patch(`{"auth":` + oauth2Auth + `,"headers":{}}`)
	if err != nil || got.Auth == nil || got.Auth.Type != webhooks.AuthOAuth2 || got.HeaderNames != nil || got.HeadersSealed != nil {
		t.Fatalf("auth replaced and headers cleared: %+v, %v", got, err)
	}
	_, err = patch(`{"headers":{"authorization":"Basic eA=="}}`)
	invalid(t, err, "headers.authorization")
	got, err = patch(`{"auth":null,"headers":{"Authorization":"Basic eA=="}}`)
	if err != nil || got.Auth != nil || got.AuthSecretSealed != nil || len(got.HeaderNames) != 1 {
		t.Fatalf("auth removed, header set: %+v, %v", got, err)
	}
	got, err = patch(`{"headers":null}`)
	if err != nil || got.HeaderNames != nil {
		t.Fatalf("headers null: %+v, %v", got, err)
	}
}

// certStore is a fakeStore that keeps client certificates.
type certStore struct {
	*fakeStore
	cur   *webhooks.ClientCert
	added int
}

func (s *certStore) ClientCertificate(context.Context, string, string, time.Time) (webhooks.ClientCert, *webhooks.ClientCert, error) {
	if s.cur == nil {
		return webhooks.ClientCert{}, nil, apperr.NotFound("webhook_client_certificate")
	}
	return *s.cur, nil, nil
}

func (s *certStore) AddClientCertificate(_ context.Context, c webhooks.ClientCert) error {
	s.added++
	if s.cur == nil {
		s.cur = &c
	}
	return nil
}

func (s *certStore) RotateClientCertificate(context.Context, webhooks.ClientCert, time.Time) error {
	return errors.New("not used")
}

// TestDeliverAuthenticates: an attempt carries the endpoint's static
// headers, its OAuth 2.0 credentials for the sender, or the merchant's
// client certificate (made on first need), and a refused token shows in the
// attempt's error.
func TestDeliverAuthenticates(t *testing.T) {
	s, _, _ := receiverService(t) // the rig's keyring
	e, err := createWith(t, s, `{"url":"https://hooks.example.com/x","events":["charge.captured"],"auth":`+oauth2Auth+
		`,"headers":{"X-Api-Key":"key-value-1"}}`)
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, defaultSchedule)
	r.store.endpoint = e
	r.sender.answer = func(int) webhooks.Response {
		return webhooks.Response{StatusCode: 401, Duration: time.Millisecond, TokenRefreshed: true}
	}
	if err := r.deliver(); err == nil {
		t.Fatal("a refused delivery was not retried")
	}
	post := r.sender.posts()[0]
	if post.Headers["X-Api-Key"] != "key-value-1" || post.Headers["X-Service-Event-Id"] != eventID {
		t.Errorf("headers = %v", post.Headers)
	}
	if o := post.OAuth2; o == nil || o.ClientSecret != "s3cret-value" || o.Endpoint != e.ID || o.Version == "" ||
		o.TokenURL != "https://auth.example.com/token" || o.ClientID != "gh" {
		t.Fatalf("oauth2 = %+v", post.OAuth2)
	}
	if strings.Contains(fmt.Sprintf("%v %+v %#v", post.OAuth2, post.OAuth2, post.OAuth2), "s3cret-value") {
		t.Error("the OAuth2 credentials print their secret")
	}
	_, _, records := r.store.state()
	if msg := records[0].Attempt.Error; msg == nil || !strings.Contains(*msg, "oauth2 token with 401") {
		t.Errorf("attempt error = %v, want the refused token named", msg)
	}

	m, err := createWith(t, s, `{"url":"https://hooks.example.com/y","events":["charge.captured"],"auth":{"type":"mtls"}}`)
	if err != nil {
		t.Fatal(err)
	}
	r = newRig(t, defaultSchedule)
	r.store.endpoint = m
	cs := &certStore{fakeStore: r.store}
	d := webhooks.NewDeliverer(cs, r.sender, r.keys, defaultSchedule, r.clock.now, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	for range 2 {
		r.store.delivery.Status, r.store.delivery.Attempts = webhooks.StatusPending, 0
		if err := d.Deliver(context.Background(), deliveryID); err != nil {
			t.Fatal(err)
		}
	}
	posts := r.sender.posts()
	if cs.added != 1 || cs.cur == nil || len(posts) != 2 {
		t.Fatalf("certificates made = %d, posts = %d; want one made on first need", cs.added, len(posts))
	}
	for _, p := range posts {
		if p.ClientCert == nil || p.ClientCertID != cs.cur.Fingerprint || p.ClientCert.Leaf.Subject.CommonName != "mer_1" {
			t.Fatalf("post without the merchant's certificate: %+v", p.ClientCertID)
		}
	}
}
