package sender

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// OAuth2 is an endpoint's OAuth 2.0 client credentials: the sender fetches
// an access token with them (RFC 6749 section 4.4), keeps it until it
// expires (less oauth2's 10 s margin) or the receiver answers 401, and sends
// it as Authorization: Bearer.
type OAuth2 struct {
	// Endpoint and Version key the cached token: a new Version (the auth
	// was changed) drops the endpoint's token.
	Endpoint     string
	Version      string
	TokenURL     string
	ClientID     string
	ClientSecret string
	Scopes       []string
}

// ErrOAuth2Token is the error of an attempt for which no access token could
// be had; nothing was sent to the receiver. Its text never holds the client secret, the token
// or what the token endpoint answered beyond its status and error code.
var ErrOAuth2Token = errors.New("oauth2 token")

// tokenError is an ErrOAuth2Token with the merchant-facing reason.
type tokenError struct {
	reason string // one of a small set, see tokenReason
	err    error  // for the operator's log
}

func (e *tokenError) Error() string { return "oauth2 token: " + e.reason + ": " + e.err.Error() }
func (e *tokenError) Unwrap() []error {
	return []error{ErrOAuth2Token, e.err}
}

// errorCode is the shape of an OAuth 2.0 error code (RFC 6749 5.2) shown in
// the attempt log; anything else the token endpoint said is not.
var errorCode = regexp.MustCompile(`^[a-z_]{1,40}$`)

// tokenFailure describes why fetching a token failed, without what the
// token endpoint's body held (it may echo the request).
func tokenFailure(tokenURL string, err error) error {
	where := tokenURL
	if u, perr := url.Parse(tokenURL); perr == nil {
		where = u.Scheme + "://" + u.Host
	}
	var re *oauth2.RetrieveError
	switch {
	case errors.As(err, &re):
		reason := "token endpoint answered " + statusOf(re.Response)
		if errorCode.MatchString(re.ErrorCode) {
			reason += " " + re.ErrorCode
		}
		return &tokenError{reason: reason, err: fmt.Errorf("POST %s: %s", where, reason)}
	case Reason(err) != ReasonFailed:
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the token URL
		}
		return &tokenError{reason: Reason(err), err: fmt.Errorf("POST %s: %w", where, err)}
	}
	return &tokenError{reason: "invalid token response", err: fmt.Errorf("POST %s: invalid token response", where)}
}

func statusOf(r *http.Response) string {
	if r == nil {
		return "an error"
	}
	return fmt.Sprint(r.StatusCode)
}

// tokens caches one token source per endpoint.
type tokens struct {
	client *http.Client // the token endpoint's client: the deliveries' dial-time checks and timeout
	mu     sync.Mutex
	byEP   map[string]*tokenEntry
}

// maxTokenEntries bounds the endpoints whose tokens a sender keeps.
const maxTokenEntries = 10000

// tokenEntry is one endpoint's token source; gen counts the sources made
// since, so that of several attempts refused with the same token only the
// first drops it.
type tokenEntry struct {
	version string
	conf    *clientcredentials.Config
	client  *http.Client
	mu      sync.Mutex
	src     oauth2.TokenSource
	gen     int
}

func (e *tokenEntry) fresh() {
	e.src = oauth2.ReuseTokenSource(nil, oauth2TokenFunc(func() (*oauth2.Token, error) {
		ctx := context.WithValue(context.Background(), oauth2.HTTPClient, e.client)
		return e.conf.Token(ctx) // a new request each time: the reuse is e.src's
	}))
}

type oauth2TokenFunc func() (*oauth2.Token, error)

func (f oauth2TokenFunc) Token() (*oauth2.Token, error) { return f() }

// entry returns the endpoint's token source, made anew when its auth
// changed.
func (t *tokens) entry(o *OAuth2) *tokenEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.byEP[o.Endpoint]
	if ok && e.version == o.Version {
		return e
	}
	if !ok && len(t.byEP) >= maxTokenEntries {
		for k := range t.byEP { // any one: a dropped entry only costs a token request
			delete(t.byEP, k)
			break
		}
	}
	e = &tokenEntry{version: o.Version, client: t.client, conf: &clientcredentials.Config{ClientID: o.ClientID,
		ClientSecret: o.ClientSecret, TokenURL: o.TokenURL, Scopes: o.Scopes}}
	e.fresh()
	t.byEP[o.Endpoint] = e
	return e
}

// token returns the endpoint's access token (fetched if none is cached or
// it expired) and the generation of the source it came from.
func (t *tokens) token(o *OAuth2) (string, int, error) {
	e := t.entry(o)
	e.mu.Lock()
	src, gen := e.src, e.gen
	e.mu.Unlock()
	tok, err := src.Token()
	if err != nil {
		return "", gen, tokenFailure(o.TokenURL, err)
	}
	return tok.AccessToken, gen, nil
}

// refused drops the endpoint's token after the receiver refused it (401),
// unless another attempt already did since the token was taken (gen).
func (t *tokens) refused(o *OAuth2, gen int) {
	e := t.entry(o)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gen == gen {
		e.fresh()
		e.gen++
	}
}

// mtls keeps one transport per client certificate, so a connection made
// with one merchant's certificate never carries another's deliveries.
type mtls struct {
	base *http.Transport
	mu   sync.Mutex
	byID map[string]*mtlsEntry
}

type mtlsEntry struct {
	client *http.Client
	t      *http.Transport
	used   time.Time
}

// maxCertTransports bounds the transports kept; the least recently used
// goes first.
const maxCertTransports = 64

// client returns the client that presents cert (named id, its fingerprint).
func (m *mtls) client(id string, cert *tls.Certificate, newClient func(*http.Transport) *http.Client) *http.Client {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if e, ok := m.byID[id]; ok {
		e.used = now
		return e.client
	}
	if len(m.byID) >= maxCertTransports {
		oldest := ""
		for k, e := range m.byID {
			if oldest == "" || e.used.Before(m.byID[oldest].used) {
				oldest = k
			}
		}
		m.byID[oldest].t.CloseIdleConnections()
		delete(m.byID, oldest)
	}
	t := m.base.Clone() // its TLS config cloned too: the same roots and minimum version
	c := *cert
	// Presented whatever CAs the receiver names: it decides whether to
	// trust the merchant's certificate.
	t.TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
	e := &mtlsEntry{client: newClient(t), t: t, used: now}
	m.byID[id] = e
	return e.client
}

func (m *mtls) closeIdle() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.byID {
		e.t.CloseIdleConnections()
	}
}
