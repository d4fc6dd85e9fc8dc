package webhooks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// The types of receiver authentication an endpoint may carry beyond the
// signature (docs/webhooks.md, "Authenticating Gatehouse to your receiver").
const (
	// AuthOAuth2: an OAuth 2.0 access token fetched with the client
	// credentials grant, sent as Authorization: Bearer.
	AuthOAuth2 = "oauth2_client_credentials"
	// AuthMTLS: the merchant's client certificate, presented in the TLS
	// handshake of https deliveries.
	AuthMTLS = "mtls"
)

// Bounds of an endpoint's receiver authentication and static headers.
const (
	// MaxHeaders is how many static headers an endpoint may carry.
	MaxHeaders     = 10
	maxHeaderName  = 256
	maxHeaderValue = 1024
	maxClientID    = 256
	maxSecret      = 1024
	maxScopes      = 20
	maxScope       = 256
)

// HeaderMask stands for every static header's value in the endpoint's
// public form: the values may be credentials and are never shown again.
const HeaderMask = "********"

// ReceiverAuth is an endpoint's receiver authentication as stored, without
// the client secret (Endpoint.AuthSecretSealed holds it).
type ReceiverAuth struct {
	Type     string   `json:"type"`
	TokenURL string   `json:"token_url,omitempty"`
	ClientID string   `json:"client_id,omitempty"`
	Scopes   []string `json:"scopes,omitempty"`
}

// authParams is the "auth" object of an endpoint's create or patch body.
type authParams struct {
	Type         *string  `json:"type"`
	TokenURL     *string  `json:"token_url"`
	ClientID     *string  `json:"client_id"`
	ClientSecret *string  `json:"client_secret"`
	Scopes       []string `json:"scopes"`
}

// receiver is an endpoint's checked receiver authentication and static
// headers, sealed, ready to store.
type receiver struct {
	auth          *ReceiverAuth
	secretSealed  []byte
	headerNames   []string
	headersSealed []byte
}

// authAAD and headersAAD bind the sealed client secret and headers to their
// endpoint, each to its own use.
func authAAD(endpointID string) []byte {
	return keyring.AssociatedData("webhook endpoint oauth2 client secret", endpointID)
}

func headersAAD(endpointID string) []byte {
	return keyring.AssociatedData("webhook endpoint static headers", endpointID)
}

// isNull reports whether a raw JSON value is absent-as-null.
func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// parseAuth checks the "auth" object of a request body (not null) and
// returns it sealed for the endpoint. Errors are parameter_invalid naming
// the field (auth, auth.type, auth.token_url, ...).
func (s *Service) parseAuth(endpointID string, raw json.RawMessage) (*ReceiverAuth, []byte, error) {
	var p authParams
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			field := strings.SplitN(te.Field, ".", 2)[0]
			return nil, nil, apperr.Invalid("auth."+field, "auth.%s has the wrong type.", field)
		}
		return nil, nil, apperr.Invalid("auth", "auth must be an object with type %s or %s, and no other fields than type, token_url, client_id, client_secret and scopes.", AuthOAuth2, AuthMTLS)
	}
	if p.Type == nil || *p.Type == "" {
		return nil, nil, apperr.Missing("auth.type")
	}
	switch *p.Type {
	case AuthMTLS:
		if p.TokenURL != nil || p.ClientID != nil || p.ClientSecret != nil || p.Scopes != nil {
			return nil, nil, apperr.Invalid("auth", "auth of type mtls takes no other field.")
		}
		return &ReceiverAuth{Type: AuthMTLS}, nil, nil
	case AuthOAuth2:
	default:
		return nil, nil, apperr.Invalid("auth.type", "auth.type must be %s or %s.", AuthOAuth2, AuthMTLS)
	}
	if p.TokenURL == nil || *p.TokenURL == "" {
		return nil, nil, apperr.Missing("auth.token_url")
	}
	tokenURL, err := s.checkURLAs("auth.token_url", *p.TokenURL)
	if err != nil {
		return nil, nil, err
	}
	if u, _ := url.Parse(tokenURL); u != nil && u.RawQuery != "" {
		return nil, nil, apperr.Invalid("auth.token_url", "auth.token_url must not have a query.")
	}
	if p.ClientID == nil || *p.ClientID == "" {
		return nil, nil, apperr.Missing("auth.client_id")
	}
	if err := checkCredential("auth.client_id", *p.ClientID, maxClientID); err != nil {
		return nil, nil, err
	}
	if p.ClientSecret == nil || *p.ClientSecret == "" {
		return nil, nil, apperr.Missing("auth.client_secret")
	}
	if err := checkCredential("auth.client_secret", *p.ClientSecret, maxSecret); err != nil {
		return nil, nil, err
	}
	scopes, err := checkScopes(p.Scopes)
	if err != nil {
		return nil, nil, err
	}
	sealed, err := s.keys.Seal(keyring.PurposeWebhook, []byte(*p.ClientSecret), authAAD(endpointID))
	if err != nil {
		return nil, nil, apperr.Internal(err)
	}
	return &ReceiverAuth{Type: AuthOAuth2, TokenURL: tokenURL, ClientID: *p.ClientID, Scopes: scopes}, sealed, nil
}

// checkCredential bounds a client id or secret: printable ASCII (RFC 6749
// appendix A), at most max bytes. The message never repeats the value.
func checkCredential(param, v string, max int) error {
	if len(v) > max {
		return apperr.Invalid(param, "%s must be at most %d characters.", param, max)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return apperr.Invalid(param, "%s must be printable ASCII characters.", param)
		}
	}
	return nil
}

// checkScopes checks the requested scopes: at most maxScopes, each a
// scope-token of RFC 6749 section 3.3 (no spaces, quotes or backslashes).
func checkScopes(list []string) ([]string, error) {
	if len(list) > maxScopes {
		return nil, apperr.Invalid("auth.scopes", "auth.scopes must name at most %d scopes.", maxScopes)
	}
	out := make([]string, 0, len(list))
	for _, sc := range list {
		if sc == "" || len(sc) > maxScope {
			return nil, apperr.Invalid("auth.scopes", "Each scope must be 1 to %d characters.", maxScope)
		}
		for i := 0; i < len(sc); i++ {
			if c := sc[i]; c <= 0x20 || c > 0x7e || c == '"' || c == '\\' {
				return nil, apperr.Invalid("auth.scopes", "A scope must not contain spaces, quotes, backslashes or control characters.")
			}
		}
		out = append(out, sc)
	}
	return out, nil
}

// reservedHeaders are the headers the gateway (or HTTP itself) sets on
// every delivery: a static header may not override them. Names starting
// with X-Service- or webhook- are the gateway's too, and Authorization is
// when the endpoint uses OAuth 2.0.
var reservedHeaders = map[string]bool{
	"content-type": true, "content-length": true, "content-encoding": true, "host": true,
	"transfer-encoding": true, "connection": true, "keep-alive": true, "proxy-connection": true,
	"te": true, "trailer": true, "upgrade": true, "expect": true, "user-agent": true,
}

// parseHeaders checks the "headers" object of a request body and returns
// the names (sorted) and the headers sealed for the endpoint; an empty
// object clears them (nil, nil). oauth2 says the endpoint will use OAuth
// 2.0, so Authorization is the gateway's.
func (s *Service) parseHeaders(endpointID string, raw json.RawMessage, oauth2 bool) ([]string, []byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, apperr.Invalid("headers", "headers must be an object of header names to string values.")
	}
	if len(m) > MaxHeaders {
		return nil, nil, apperr.Invalid("headers", "headers may hold at most %d headers.", MaxHeaders)
	}
	if len(m) == 0 {
		return nil, nil, nil
	}
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	values := make(map[string]string, len(m))
	seen := map[string]bool{}
	for _, name := range names {
		param := "headers." + name
		if !validHeaderName(name) {
			return nil, nil, apperr.Invalid(param, "A header name must be 1 to %d token characters (RFC 9110).", maxHeaderName)
		}
		if err := checkHeaderName(param, name, oauth2); err != nil {
			return nil, nil, err
		}
		lower := strings.ToLower(name)
		if seen[lower] {
			return nil, nil, apperr.Invalid(param, "Header %s is named twice.", name)
		}
		seen[lower] = true
		var v string
		if err := json.Unmarshal(m[name], &v); err != nil {
			return nil, nil, apperr.Invalid(param, "The value of header %s must be a string.", name)
		}
		if len(v) > maxHeaderValue {
			return nil, nil, apperr.Invalid(param, "The value of header %s must be at most %d bytes.", name, maxHeaderValue)
		}
		if !validHeaderValue(v) {
			return nil, nil, apperr.Invalid(param, "The value of header %s must not contain control characters (CR, LF, NUL, ...).", name)
		}
		values[name] = v
	}
	plain, err := json.Marshal(values)
	if err != nil {
		return nil, nil, apperr.Internal(err)
	}
	sealed, err := s.keys.Seal(keyring.PurposeWebhook, plain, headersAAD(endpointID))
	if err != nil {
		return nil, nil, apperr.Internal(err)
	}
	return names, sealed, nil
}

// checkHeaderName refuses a static header that would override one the
// gateway sets.
func checkHeaderName(param, name string, oauth2 bool) error {
	lower := strings.ToLower(name)
	switch {
	case reservedHeaders[lower], strings.HasPrefix(lower, "x-service-"), strings.HasPrefix(lower, "webhook-"):
		return apperr.Invalid(param, "Header %s is set by Gatehouse and cannot be overridden.", name)
	case oauth2 && lower == "authorization":
		return apperr.Invalid(param, "Header Authorization carries the OAuth 2.0 token of the endpoint's auth and cannot be set.")
	}
	return nil
}

// validHeaderName reports whether name is an HTTP token (RFC 9110 5.6.2).
func validHeaderName(name string) bool {
	if name == "" || len(name) > maxHeaderName {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v can be sent as a field value: no
// control characters other than horizontal tab, no DEL.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// receiverChange is what a create or a patch asks of an endpoint's
// receiver authentication and headers: setAuth with auth nil removes it,
// setHeaders with nil names clears them.
type receiverChange struct {
	setAuth, setHeaders bool
	receiver
}

// parseReceiver checks the "auth" and "headers" of a request against the
// endpoint they will belong to: its id (the sealing binds to it), its URL
// and, for what the request leaves alone, what the endpoint has (cur; nil
// for a new endpoint). A nil raw value is absent; JSON null removes.
func (s *Service) parseReceiver(endpointID, endpointURL string, cur *Endpoint, authRaw, headersRaw json.RawMessage) (receiverChange, error) {
	var ch receiverChange
	if cur != nil {
		ch.auth, ch.headerNames = cur.Auth, cur.HeaderNames
	}
	if authRaw != nil {
		ch.setAuth, ch.auth = true, nil
		if !isNull(authRaw) {
			a, sealed, err := s.parseAuth(endpointID, authRaw)
			if err != nil {
				return receiverChange{}, err
			}
			ch.auth, ch.secretSealed = a, sealed
		}
	}
	oauth2 := ch.auth != nil && ch.auth.Type == AuthOAuth2
	if headersRaw != nil {
		ch.setHeaders, ch.headerNames = true, nil
		if !isNull(headersRaw) {
			names, sealed, err := s.parseHeaders(endpointID, headersRaw, oauth2)
			if err != nil {
				return receiverChange{}, err
			}
			ch.headerNames, ch.headersSealed = names, sealed
		}
	} else if oauth2 {
		for _, name := range ch.headerNames {
			if strings.EqualFold(name, "Authorization") {
				return receiverChange{}, apperr.Invalid("auth.type", "The endpoint sends a static Authorization header; remove it (headers) to use %s.", AuthOAuth2)
			}
		}
	}
	if ch.auth != nil && ch.auth.Type == AuthMTLS && !strings.HasPrefix(endpointURL, "https://") {
		if authRaw != nil {
			return receiverChange{}, apperr.Invalid("auth.type", "auth of type mtls needs an https:// url.")
		}
		return receiverChange{}, apperr.Invalid("url", "url must be https:// while the endpoint's auth is mtls.")
	}
	return ch, nil
}

// receiverView is the public form of an endpoint's receiver authentication
// (never the client secret) and static headers (names, values masked).
func (e Endpoint) receiverView() (*resource.WebhookEndpointAuth, map[string]string) {
	headers := make(map[string]string, len(e.HeaderNames))
	for _, name := range e.HeaderNames {
		headers[name] = HeaderMask
	}
	if e.Auth == nil {
		return nil, headers
	}
	a := &resource.WebhookEndpointAuth{Type: e.Auth.Type}
	if e.Auth.Type == AuthOAuth2 {
		tokenURL, clientID := e.Auth.TokenURL, e.Auth.ClientID
		a.TokenURL, a.ClientID, a.Scopes = &tokenURL, &clientID, e.Auth.Scopes
	}
	return a, headers
}

// OAuth2 is what the sender needs to fetch an endpoint's access tokens. It
// holds the client secret in clear: it lives in the worker's memory only,
// never in a task, a log or an error.
type OAuth2 struct {
	// Endpoint and Version name the endpoint and the version of its auth:
	// a token fetched for one version is never used for another, so a
	// patch of the auth takes effect at the next attempt.
	Endpoint     string
	Version      string
	TokenURL     string
	ClientID     string
	ClientSecret string
	Scopes       []string
}

// String never shows the secret.
func (o OAuth2) String() string {
	return fmt.Sprintf("oauth2 client %s at %s", o.ClientID, o.TokenURL)
}

// GoString never shows the secret either.
func (o OAuth2) GoString() string { return o.String() }

// authenticate adds the endpoint's static headers and receiver
// authentication to an attempt: the headers opened (none overrides one the
// gateway set), the OAuth 2.0 client credentials, or for an https mTLS
// endpoint the merchant's current client certificate, made on first need.
func (d *Deliverer) authenticate(ctx context.Context, ep Endpoint, o *Outgoing, now time.Time) error {
	oauth2 := ep.Auth != nil && ep.Auth.Type == AuthOAuth2
	if ep.HeadersSealed != nil {
		plain, err := d.keys.Open(keyring.PurposeWebhook, ep.HeadersSealed, headersAAD(ep.ID))
		if err != nil {
			return apperr.Internal(fmt.Errorf("webhooks: open static headers of %s: %w", ep.ID, err))
		}
		var static map[string]string
		if err := json.Unmarshal(plain, &static); err != nil {
			return apperr.Internal(fmt.Errorf("webhooks: static headers of %s: %w", ep.ID, err))
		}
		for name, v := range static {
			if checkHeaderName("", name, oauth2) == nil && validHeaderName(name) && validHeaderValue(v) {
				o.Headers[name] = v
			}
		}
	}
	switch {
	case oauth2:
		secret, err := d.keys.Open(keyring.PurposeWebhook, ep.AuthSecretSealed, authAAD(ep.ID))
		if err != nil {
			return apperr.Internal(fmt.Errorf("webhooks: open oauth2 client secret of %s: %w", ep.ID, err))
		}
		// The version changes with every write of the auth: the sealed
		// secret has a fresh nonce each time.
		sum := sha256.Sum256(ep.AuthSecretSealed)
		o.OAuth2 = &OAuth2{Endpoint: ep.ID, Version: hex.EncodeToString(sum[:8]), TokenURL: ep.Auth.TokenURL,
			ClientID: ep.Auth.ClientID, ClientSecret: string(secret), Scopes: ep.Auth.Scopes}
	case ep.Auth != nil && ep.Auth.Type == AuthMTLS && strings.HasPrefix(ep.URL, "https://"):
		if d.certs == nil {
			return apperr.Internal(errNoCertStore)
		}
		cur, _, err := currentClientCert(ctx, d.certs, d.keys, ep.MerchantID, ep.Environment, now, now)
		if err != nil {
			return err
		}
		cert, err := cur.TLS(d.keys)
		if err != nil {
			return apperr.Internal(err)
		}
		o.ClientCert, o.ClientCertID = &cert, cur.Fingerprint
	}
	return nil
}
