package sender

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const clientSecret = "cs_very_secret_value_42"

// tokenServer issues tokens tok-1, tok-2, ... to the client credentials
// (HTTP Basic or form) and counts the requests.
type tokenServer struct {
	*httptest.Server
	requests atomic.Int32
}

func newTokenServer(t *testing.T, expiresIn int) *tokenServer {
	t.Helper()
	ts := &tokenServer{}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := ts.requests.Add(1)
		if err := r.ParseForm(); err != nil || r.Form.Get("grant_type") != "client_credentials" {
			http.Error(w, "bad grant", http.StatusBadRequest)
			return
		}
		id, secret, ok := r.BasicAuth()
		if !ok {
			id, secret = r.Form.Get("client_id"), r.Form.Get("client_secret")
		}
		if id != "gatehouse" || secret != clientSecret {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			// An endpoint that echoes what it got: none of it may reach the log.
			fmt.Fprintf(w, `{"error":"invalid_client","error_description":"bad secret %s"}`, secret)
			return
		}
		if got := r.Form.Get("scope"); got != "webhooks.write" {
			http.Error(w, "scope "+got, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"tok-%d","token_type":"Bearer","expires_in":%d}`, n, expiresIn)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// bearerReceiver accepts a POST with an accepted bearer token and answers
// 401 to any other; it records the tokens it saw.
type bearerReceiver struct {
	*httptest.Server
	mu      sync.Mutex
	seen    []string
	refused map[string]bool
}

func newBearerReceiver(t *testing.T) *bearerReceiver {
	t.Helper()
	br := &bearerReceiver{refused: map[string]bool{}}
	br.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		br.mu.Lock()
		br.seen = append(br.seen, tok)
		refused := br.refused[tok]
		br.mu.Unlock()
		if !ok || tok == "" || refused {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(br.Close)
	return br
}

func (br *bearerReceiver) tokens() []string {
	br.mu.Lock()
	defer br.mu.Unlock()
	return append([]string(nil), br.seen...)
}

func (br *bearerReceiver) refuse(tok string) {
	br.mu.Lock()
	defer br.mu.Unlock()
	br.refused[tok] = true
}

func oauth2Request(receiver, tokenURL, version string) Request {
	return Request{URL: receiver + "/hook", Body: []byte(`{}`), Headers: map[string]string{"X-Service-Event-Id": "e1"},
		OAuth2: &OAuth2{Endpoint: "we_1", Version: version, TokenURL: tokenURL + "/token", ClientID: "gatehouse",
			ClientSecret: clientSecret, Scopes: []string{"webhooks.write"}}}
}

// TestOAuth2TokenCachedAndRefreshedAfter401: one token serves several
// deliveries until the receiver refuses it; then exactly one new token is
// fetched and the POST is made again within the attempt.
func TestOAuth2TokenCachedAndRefreshedAfter401(t *testing.T) {
	t.Parallel()
	ts, rcv := newTokenServer(t, 3600), newBearerReceiver(t)
	s := newSender(Options{Timeout: roomy, AllowPrivate: true}, nil)
	for i := range 3 {
		if res := s.Send(context.Background(), oauth2Request(rcv.URL, ts.URL, "v1")); !res.OK() || res.TokenRefreshed {
			t.Fatalf("delivery %d: %+v", i, res)
		}
	}
	if n := ts.requests.Load(); n != 1 {
		t.Fatalf("token requests after 3 deliveries = %d, want 1 (cached)", n)
	}
	if got := rcv.tokens(); strings.Join(got, ",") != "tok-1,tok-1,tok-1" {
		t.Fatalf("tokens seen = %v", got)
	}

	rcv.refuse("tok-1")
	res := s.Send(context.Background(), oauth2Request(rcv.URL, ts.URL, "v1"))
	if !res.OK() || !res.TokenRefreshed {
		t.Fatalf("after the token was refused: %+v, want 2xx with TokenRefreshed", res)
	}
	if n := ts.requests.Load(); n != 2 {
		t.Fatalf("token requests after a 401 = %d, want 2", n)
	}
	if got := rcv.tokens(); got[len(got)-2] != "tok-1" || got[len(got)-1] != "tok-2" {
		t.Fatalf("tokens seen = %v, want tok-1 refused then tok-2", got)
	}
	if res := s.Send(context.Background(), oauth2Request(rcv.URL, ts.URL, "v1")); !res.OK() || ts.requests.Load() != 2 {
		t.Fatalf("next delivery: %+v, token requests %d; want the new token reused", res, ts.requests.Load())
	}

	// A new version of the endpoint's auth (a PATCH) fetches a token of its own.
	if res := s.Send(context.Background(), oauth2Request(rcv.URL, ts.URL, "v2")); !res.OK() || ts.requests.Load() != 3 {
		t.Fatalf("after a new auth version: %+v, token requests %d; want 3", res, ts.requests.Load())
	}

	// A receiver that refuses every token: one refetch, then the 401 stands.
	rcv.refuse("tok-3")
	rcv.refuse("tok-4")
	res = s.Send(context.Background(), oauth2Request(rcv.URL, ts.URL, "v2"))
	if res.OK() || res.StatusCode != http.StatusUnauthorized || !res.TokenRefreshed || ts.requests.Load() != 4 {
		t.Fatalf("refused twice: %+v, token requests %d; want 401 after one refetch", res, ts.requests.Load())
	}
}

// TestOAuth2TokenExpiry: a token that expires within oauth2's margin is
// fetched again for the next delivery.
func TestOAuth2TokenExpiry(t *testing.T) {
	t.Parallel()
	ts, rcv := newTokenServer(t, 5), newBearerReceiver(t) // 5 s: inside the 10 s margin, so expired at once
	s := newSender(Options{Timeout: roomy, AllowPrivate: true}, nil)
	for range 2 {
		if res := s.Send(context.Background(), oauth2Request(rcv.URL, ts.URL, "v1")); !res.OK() {
			t.Fatalf("delivery: %+v", res)
		}
	}
	if n := ts.requests.Load(); n != 2 {
		t.Fatalf("token requests = %d, want 2 (the first token counts as expired)", n)
	}
}

// TestOAuth2TokenFailure: no token, no POST; the error names the token
// endpoint's status and code, never the secret or the echoed body.
func TestOAuth2TokenFailure(t *testing.T) {
	t.Parallel()
	ts, rcv := newTokenServer(t, 3600), newBearerReceiver(t)
	s := newSender(Options{Timeout: roomy, AllowPrivate: true}, nil)
	req := oauth2Request(rcv.URL, ts.URL, "v1")
	req.OAuth2.ClientSecret = "wrong-" + clientSecret
	res := s.Send(context.Background(), req)
	if res.Err == nil || !errors.Is(res.Err, ErrOAuth2Token) || res.StatusCode != 0 {
		t.Fatalf("result = %+v, want an ErrOAuth2Token and no answer", res)
	}
	if got, want := Reason(res.Err), "oauth2 token: token endpoint answered 401 invalid_client"; got != want {
		t.Errorf("Reason = %q, want %q", got, want)
	}
	if strings.Contains(res.Err.Error(), clientSecret) || strings.Contains(fmt.Sprintf("%+v %#v", res.Err, req), clientSecret) {
		t.Errorf("the secret leaked into %q", res.Err)
	}
	if len(rcv.tokens()) != 0 {
		t.Errorf("the receiver was sent %d requests without a token", len(rcv.tokens()))
	}
}

// TestOAuth2TokenURLCheckedAtDial: a token URL whose name resolves to a
// private address is refused at dial time, as deliveries are, unless
// private networks are allowed.
func TestOAuth2TokenURLCheckedAtDial(t *testing.T) {
	t.Parallel()
	ts, rcv := newTokenServer(t, 3600), newBearerReceiver(t)
	port := ts.URL[strings.LastIndex(ts.URL, ":"):]
	tokenURL := "http://tokens.gatehouse.test" + port // resolves to 127.0.0.1
	strict := newSender(Options{Timeout: roomy}, fakeDNS(t, true))
	res := strict.Send(context.Background(), oauth2Request(rcv.URL, tokenURL, "v1"))
	if !errors.Is(res.Err, ErrForbiddenDestination) || !errors.Is(res.Err, ErrOAuth2Token) {
		t.Fatalf("result = %+v, want the token request refused at dial time", res)
	}
	if got := Reason(res.Err); got != "oauth2 token: "+ReasonNotAllowed {
		t.Errorf("Reason = %q", got)
	}
	if n := ts.requests.Load(); n != 0 {
		t.Errorf("the token server got %d requests", n)
	}
	open := newSender(Options{Timeout: roomy, AllowPrivate: true}, fakeDNS(t, true))
	if res := open.Send(context.Background(), oauth2Request(rcv.URL, tokenURL, "v1")); !res.OK() {
		t.Fatalf("with private networks allowed: %+v", res)
	}
}

// TestOAuth2TokenRedirectNotFollowed: a token endpoint's redirect is a
// failure, not followed.
func TestOAuth2TokenRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	ts, rcv := newTokenServer(t, 3600), newBearerReceiver(t)
	var hops atomic.Int32
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hops.Add(1)
		http.Redirect(w, r, ts.URL+"/token", http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	s := newSender(Options{Timeout: roomy, AllowPrivate: true}, nil)
	res := s.Send(context.Background(), oauth2Request(rcv.URL, redirect.URL, "v1"))
	if !errors.Is(res.Err, ErrOAuth2Token) || Reason(res.Err) != "oauth2 token: token endpoint answered 307" {
		t.Fatalf("result = %+v (%q), want a token failure naming the 307", res, Reason(res.Err))
	}
	if ts.requests.Load() != 0 {
		t.Errorf("the redirect was followed")
	}
}

// selfSignedClientCert is a client certificate like the gateway's.
func selfSignedClientCert(t *testing.T, cn string) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, hex.EncodeToString(sum[:])
}

// TestClientCertificatePresented: an https receiver that requires a client
// certificate gets the one of the request, on connections of its own: a
// request without one, or with another, never rides a connection made
// with the first.
func TestClientCertificatePresented(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		sum := sha256.Sum256(r.TLS.PeerCertificates[0].Raw)
		mu.Lock()
		seen = append(seen, hex.EncodeToString(sum[:]))
		mu.Unlock()
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	defer srv.Close()
	s := newSender(Options{Timeout: roomy, AllowPrivate: true}, nil)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	s.transport.TLSClientConfig.RootCAs = roots

	first, firstFP := selfSignedClientCert(t, "mer_a")
	second, secondFP := selfSignedClientCert(t, "mer_a")
	send := func(cert *tls.Certificate, id string) Result {
		return s.Send(context.Background(), Request{URL: srv.URL + "/hook", Body: []byte(`{}`), ClientCert: cert, ClientCertID: id})
	}
	for range 2 {
		if res := send(&first, firstFP); !res.OK() {
			t.Fatalf("with the certificate: %+v", res)
		}
	}
	if res := send(nil, ""); res.OK() || Reason(res.Err) != ReasonTLS {
		t.Fatalf("without a certificate: %+v, want a TLS failure", res)
	}
	if res := send(&second, secondFP); !res.OK() {
		t.Fatalf("with the rotated certificate: %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{firstFP, firstFP, secondFP}; strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Fatalf("receiver saw %v, want %v", seen, want)
	}
	// An http URL never carries a certificate: there is no handshake.
	plain := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer plain.Close()
	if res := s.Send(context.Background(), Request{URL: plain.URL, Body: []byte(`{}`), ClientCert: &first, ClientCertID: firstFP}); !res.OK() {
		t.Fatalf("http with a certificate: %+v", res)
	}
}
