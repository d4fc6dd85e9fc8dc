package e2e

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// TestWebhookReceiverAuth is receiver authentication (docs/webhooks.md,
// "Authenticating Gatehouse to your receiver") against the real binaries:
// an OAuth 2.0 endpoint gets one token for several deliveries, a new one
// (exactly one more token request) when its receiver refuses the old with
// 401, within the same attempt; the client secret and the static header
// values never appear in an answer or a log; static headers arrive; bad
// headers are refused naming them; an mTLS receiver that trusts the
// merchant's client certificate gets deliveries, and after a rotation
// sees the new certificate.
func TestWebhookReceiverAuth(t *testing.T) {
	parallel(t)
	clientSecret := "cs_" + harness.RandomHex(16)
	apiKeyValue := "hk_" + harness.RandomHex(16)

	// The OAuth 2.0 token endpoint: tok-1, tok-2, ... for the client's credentials.
	var tokenRequests atomic.Int32
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := tokenRequests.Add(1)
		id, secret, ok := r.BasicAuth()
		if err := r.ParseForm(); err != nil || !ok || id != "gatehouse-e2e" || secret != clientSecret ||
			r.Form.Get("grant_type") != "client_credentials" || r.Form.Get("scope") != "hooks.write hooks.read" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"tok-%d","token_type":"Bearer","expires_in":3600}`, n)
	}))
	t.Cleanup(tokens.Close)

	// A receiver that wants the bearer token (and refuses those in refused).
	var refusedMu sync.Mutex
	refused := map[string]bool{}
	bearer := newReceiver(t, "bearer", func(h hit, _ int) (int, time.Duration, http.Header) {
		tok, ok := strings.CutPrefix(h.header.Get("Authorization"), "Bearer ")
		refusedMu.Lock()
		defer refusedMu.Unlock()
		if !ok || !strings.HasPrefix(tok, "tok-") || refused[tok] {
			return http.StatusUnauthorized, 0, nil
		}
		return http.StatusOK, 0, nil
	})

	// The mTLS receiver: it requires a client certificate that chains to
	// the pool the test gives it (the merchant's certificates), and records
	// the fingerprints it is shown. The worker trusts its server
	// certificate through SSL_CERT_FILE.
	var pool atomic.Pointer[x509.CertPool]
	pool.Store(x509.NewCertPool())
	var fpMu sync.Mutex
	var fingerprints []string
	mtls := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		sum := sha256.Sum256(r.TLS.PeerCertificates[0].Raw)
		fpMu.Lock()
		fingerprints = append(fingerprints, hex.EncodeToString(sum[:]))
		fpMu.Unlock()
	}))
	mtls.TLS = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return &tls.Config{Certificates: mtls.TLS.Certificates, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool.Load()}, nil
	}}
	mtls.StartTLS()
	t.Cleanup(mtls.Close)
	caFile := filepath.Join(t.TempDir(), "receiver-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: mtls.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	seen := func() []string {
		fpMu.Lock()
		defer fpMu.Unlock()
		return append([]string(nil), fingerprints...)
	}

	st := newStack(t, stackOptions{env: webhooksStackEnv, workerEnv: append(webhooksWorkerEnv, "SSL_CERT_FILE="+caFile)},
		"receiver authentication")
	m := newWebhookMerchant(t, st, &secretBag{}, "127.0.0.140", "receiver-auth")
	noSecrets := func(e exchange) {
		t.Helper()
		for _, s := range []string{clientSecret, apiKeyValue} {
			if strings.Contains(string(e.body), s) {
				t.Errorf("%s: the answer shows a secret: %s", e.describe(), e.body)
			}
		}
	}

	// Bad headers: refused naming them.
	create := func(extra string) exchange {
		return m.do(t, http.MethodPost, "/v1/me/webhook_endpoints",
			`{"url":"`+bearer.url()+`","events":["charge.created"]`+extra+`}`)
	}
	e := create(`,"headers":{"X-Service-Signature":"sha256=00"}`)
	mustExpect(t, e, http.StatusBadRequest, "parameter_invalid")
	if e.param() != "headers.X-Service-Signature" {
		t.Errorf("forbidden header: param %q, want headers.X-Service-Signature", e.param())
	}
	var eleven []string
	for i := range 11 {
		eleven = append(eleven, fmt.Sprintf(`"X-Custom-%d":"v"`, i))
	}
	e = create(`,"headers":{` + strings.Join(eleven, ",") + `}`)
	mustExpect(t, e, http.StatusBadRequest, "parameter_invalid")
	if e.param() != "headers" {
		t.Errorf("11 headers: param %q, want headers", e.param())
	}
	e = create(`,"auth":{"type":"oauth2_client_credentials","token_url":"` + tokens.URL + `/token","client_id":"gatehouse-e2e"}`)
	mustExpect(t, e, http.StatusBadRequest, "parameter_missing")
	if e.param() != "auth.client_secret" {
		t.Errorf("no client secret: param %q", e.param())
	}

	// The OAuth 2.0 endpoint, with a static header.
	auth := `{"type":"oauth2_client_credentials","token_url":"` + tokens.URL + `/token","client_id":"gatehouse-e2e",` +
		`"client_secret":"` + clientSecret + `","scopes":["hooks.write","hooks.read"]}`
	e = create(`,"auth":` + auth + `,"headers":{"X-Api-Key":"` + apiKeyValue + `"}`)
	mustExpect(t, e, http.StatusCreated, "")
	noSecrets(e)
	var created struct {
		Endpoint struct {
			ID      string            `json:"id"`
			Auth    map[string]any    `json:"auth"`
			Headers map[string]string `json:"headers"`
		} `json:"webhook_endpoint"`
	}
	decode(t, e, &created)
	ep := created.Endpoint
	if ep.Auth["type"] != "oauth2_client_credentials" || ep.Auth["client_id"] != "gatehouse-e2e" || ep.Headers["X-Api-Key"] != "********" {
		t.Errorf("created endpoint: auth %v, headers %v", ep.Auth, ep.Headers)
	}
	for _, e := range []exchange{
		m.do(t, http.MethodGet, "/v1/me/webhook_endpoints/"+ep.ID, ""),
		m.do(t, http.MethodGet, "/v1/me/webhook_endpoints", ""),
		m.do(t, http.MethodPatch, "/v1/me/webhook_endpoints/"+ep.ID, `{"description":"oauth2 receiver"}`),
	} {
		mustExpect(t, e, http.StatusOK, "")
		noSecrets(e)
	}

	// Several events: one token, every delivery with it and the header.
	for i := range 3 {
		m.charge(t, fmt.Sprintf("oauth-%d", i))
	}
	m.waitDeliveries(t, ep.ID, 3, isStatus("succeeded"), 20*time.Second)
	if n := tokenRequests.Load(); n != 1 {
		t.Errorf("token requests for 3 deliveries = %d, want 1", n)
	}
	for _, h := range bearer.all() {
		if h.header.Get("Authorization") != "Bearer tok-1" || h.header.Get("X-Api-Key") != apiKeyValue {
			t.Errorf("delivery %s: Authorization %q, X-Api-Key %q", h.deliveryID(), h.header.Get("Authorization"), h.header.Get("X-Api-Key"))
		}
	}

	// The receiver revokes tok-1: the next delivery gets a 401, exactly one
	// new token is fetched, and the same attempt succeeds with it.
	refusedMu.Lock()
	refused["tok-1"] = true
	refusedMu.Unlock()
	before := bearer.count()
	m.charge(t, "oauth-revoked")
	ds := m.waitDeliveries(t, ep.ID, 4, isStatus("succeeded"), 20*time.Second)
	if n := tokenRequests.Load(); n != 2 {
		t.Errorf("token requests after the 401 = %d, want 2", n)
	}
	hits := bearer.all()[before:]
	if len(hits) != 2 || hits[0].header.Get("Authorization") != "Bearer tok-1" || hits[1].header.Get("Authorization") != "Bearer tok-2" ||
		hits[0].deliveryID() != hits[1].deliveryID() || hits[0].attempt() != hits[1].attempt() {
		t.Errorf("after the revocation the receiver saw %d requests, want tok-1 refused then tok-2, in one attempt", len(hits))
	}
	if len(hits) > 0 {
		if d := ds[hits[0].deliveryID()]; len(d.Attempts) != 1 {
			t.Errorf("the refused token cost %d attempts, want 1", len(d.Attempts))
		}
	}

	// mTLS: the merchant's certificate, trusted by the receiver.
	certOf := func(e exchange) (pemText, fingerprint, previous string) {
		t.Helper()
		mustExpect(t, e, http.StatusOK, "")
		var c struct {
			Object      string `json:"object"`
			Certificate string `json:"certificate"`
			Fingerprint string `json:"fingerprint_sha256"`
			Previous    *struct {
				Fingerprint string `json:"fingerprint_sha256"`
			} `json:"previous"`
		}
		decode(t, e, &c)
		if strings.Contains(string(e.body), "PRIVATE KEY") || c.Object != "webhook_client_certificate" {
			t.Fatalf("%s: %s", e.describe(), e.body)
		}
		if c.Previous != nil {
			previous = c.Previous.Fingerprint
		}
		return c.Certificate, c.Fingerprint, previous
	}
	trust := func(pemText string) {
		t.Helper()
		p := pool.Load().Clone()
		if !p.AppendCertsFromPEM([]byte(pemText)) {
			t.Fatalf("not a PEM certificate: %q", pemText)
		}
		pool.Store(p)
	}
	first, firstFP, prev := certOf(m.do(t, http.MethodGet, "/v1/me/webhook_client_certificate", ""))
	if _, again, _ := certOf(m.do(t, http.MethodGet, "/v1/me/webhook_client_certificate", "")); again != firstFP || prev != "" {
		t.Fatalf("the certificate changed between two reads (%s, %s) or has a previous one (%q)", firstFP, again, prev)
	}
	trust(first)
	e = m.do(t, http.MethodPost, "/v1/me/webhook_endpoints",
		`{"url":"`+mtls.URL+`/hooks","events":["charge.created"],"auth":{"type":"mtls"}}`)
	mustExpect(t, e, http.StatusCreated, "")
	var mep struct {
		Endpoint struct {
			ID string `json:"id"`
		} `json:"webhook_endpoint"`
	}
	decode(t, e, &mep)
	m.charge(t, "mtls-1")
	m.waitDeliveries(t, mep.Endpoint.ID, 1, isStatus("succeeded"), 20*time.Second)
	if got := seen(); len(got) != 1 || got[0] != firstFP {
		t.Fatalf("the mTLS receiver saw %v, want %s", got, firstFP)
	}

	second, secondFP, prev := certOf(m.do(t, http.MethodPost, "/v1/me/webhook_client_certificate/rotate", ""))
	if secondFP == firstFP || prev != firstFP {
		t.Fatalf("rotate: fingerprint %s (was %s), previous %q", secondFP, firstFP, prev)
	}
	trust(second) // both trusted while the receiver switches
	m.charge(t, "mtls-2")
	m.waitDeliveries(t, mep.Endpoint.ID, 2, isStatus("succeeded"), 20*time.Second)
	if got := seen(); len(got) != 2 || got[1] != secondFP {
		t.Fatalf("after the rotation the mTLS receiver saw %v, want %s last", got, secondFP)
	}

	// Neither the client secret nor the header value reached a log.
	logs := st.logs()
	for what, s := range map[string]string{"client secret": clientSecret, "static header value": apiKeyValue} {
		if strings.Contains(logs, s) {
			t.Errorf("the %s appears in the stack's logs", what)
		}
	}
}
