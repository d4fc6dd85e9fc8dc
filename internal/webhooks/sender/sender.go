// Package sender is the HTTP adapter that carries webhook deliveries to
// merchants' endpoints. It makes one POST attempt per call (two when an
// OAuth 2.0 token was refused, see Send) and treats the
// receiver as hostile: the whole exchange is bounded by a timeout, redirects
// are never followed, at most a few bytes of the (decoded) answer are read,
// proxies from the environment are ignored, and unless private networks are
// allowed every dial is checked on the resolved IP address, so private,
// loopback, link-local, shared, unspecified and metadata addresses are never
// reached, whatever the URL's host name resolves to (docs/reliability.md I7).
package sender

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"code.dny.dev/ssrf"
)

// Defaults of Options.
const (
	DefaultTimeout = 5 * time.Second
	DefaultMaxBody = 1024
)

// maxHeaderBytes caps the response headers a receiver can make us hold.
const maxHeaderBytes = 64 << 10

// userAgent names the sender to receivers.
const userAgent = "Gatehouse-Webhooks/1"

// Errors a Result can carry (test with errors.Is). Other errors are
// transport failures: a refused or reset connection, a TLS failure, an
// unresolvable host.
var (
	// ErrForbiddenDestination: the host resolved to an address deliveries
	// must never reach (docs/reliability.md B3); nothing was sent.
	ErrForbiddenDestination = errors.New("destination address is not allowed for webhooks")
	// ErrTimeout: no complete answer within Options.Timeout.
	ErrTimeout = errors.New("no complete answer within the webhook timeout")
	// ErrInvalidURL: the URL is not an absolute http:// or https:// URL with a host.
	ErrInvalidURL = errors.New("webhook URL must be an absolute http:// or https:// URL")
)

// extraDenied are metadata addresses outside the ranges the ssrf package
// already refuses (169.254.169.254 and fd00:ec2::254 are covered there).
var extraDenied = []netip.Prefix{
	netip.MustParsePrefix("168.63.129.16/32"), // Azure platform (WireServer)
}

// Options configure a Sender.
type Options struct {
	// Timeout bounds the whole exchange: dial, TLS, sending, the response
	// headers and reading the kept part of the body. Zero means DefaultTimeout.
	Timeout time.Duration
	// AllowPrivate turns the destination check off (development and tests:
	// WEBHOOK_ALLOW_PRIVATE_NETWORKS=true).
	AllowPrivate bool
	// MaxBody is how many bytes of the decoded response body are kept in
	// Result.Body; nothing beyond is read. Zero or less means DefaultMaxBody.
	MaxBody int64
}

// Request is one delivery attempt.
type Request struct {
	URL     string
	Body    []byte
	Headers map[string]string // sent as given; Content-Type is always application/json
	// OAuth2, if set, adds Authorization: Bearer with the endpoint's access
	// token; a 401 answer drops the token, and the POST is made once more
	// with a new one.
	OAuth2 *OAuth2
	// ClientCert, if set, is presented to an https receiver that asks for
	// a client certificate; ClientCertID (its fingerprint) names it.
	ClientCert   *tls.Certificate
	ClientCertID string
}

// Result is the outcome of one attempt.
type Result struct {
	// StatusCode is the receiver's status, 0 when no response arrived. A 3xx
	// is reported as is: redirects are not followed.
	StatusCode int
	// Duration is the time the attempt took, from the call to the return.
	Duration time.Duration
	// Err is why the exchange failed, nil when a response was read. It never
	// holds the request body, the headers, or the URL's path and query.
	Err error
	// Body is the start of the response body (at most MaxBody bytes as
	// received, then made valid UTF-8 without NUL bytes so it can be stored
	// as text).
	Body string
	// TokenRefreshed: the receiver answered 401 to the cached OAuth 2.0
	// token, which was dropped; this is the answer to the POST made again
	// with a new one (or Err says why none could be had).
	TokenRefreshed bool
}

// OK reports whether the receiver accepted the delivery: a 2xx status and no error.
func (r Result) OK() bool { return r.Err == nil && r.StatusCode >= 200 && r.StatusCode < 300 }

// Sender posts deliveries. It keeps a small pool of connections shared by
// all deliveries and is safe for concurrent use.
type Sender struct {
	client    *http.Client
	transport *http.Transport
	timeout   time.Duration
	maxBody   int64
	tokens    *tokens
	mtls      *mtls
}

// IdlePerHost is how many idle connections the sender keeps per host: as
// many as the attempts a worker may run at once to one endpoint, whose
// window grows up to its merchant's slots (WEBHOOK_MERCHANT_SLOTS, 25 by
// default).
const IdlePerHost = 25

// New returns a Sender configured by o.
func New(o Options) *Sender { return newSender(o, nil) }

// newSender is New with the resolver the dialer uses (nil: the system's),
// so tests can make names resolve to loopback without DNS traffic.
func newSender(o Options, resolver *net.Resolver) *Sender {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	dialer := &net.Dialer{Timeout: o.Timeout, KeepAlive: 30 * time.Second, Resolver: resolver}
	if !o.AllowPrivate {
		dialer.Control = destinationGuard()
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true) // HTTP/2 would let a receiver push megabytes into flow-control buffers
	t := &http.Transport{
		Proxy:                  nil, // never HTTP_PROXY & co: the check is on the address we dial
		DialContext:            dialer.DialContext,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    o.Timeout,
		ResponseHeaderTimeout:  o.Timeout,
		MaxResponseHeaderBytes: maxHeaderBytes,
		// A host keeps as many idle connections as the attempts a worker
		// may run at once to one endpoint (IdlePerHost), so a busy
		// endpoint's attempts reuse connections rather than open (and,
		// over HTTPS, handshake) a new one for most of them.
		MaxIdleConns:        512,
		MaxIdleConnsPerHost: IdlePerHost,
		IdleConnTimeout:     60 * time.Second,
		Protocols:           protocols,
	}
	// The token endpoint is reached through the same checked dialer, and
	// never through a redirect, within the same timeout.
	tokenClient := noRedirects(t)
	tokenClient.Timeout = o.Timeout
	return &Sender{
		client:    noRedirects(t),
		transport: t,
		timeout:   o.Timeout,
		maxBody:   o.MaxBody,
		tokens:    &tokens{client: tokenClient, byEP: map[string]*tokenEntry{}},
		mtls:      &mtls{base: t, byID: map[string]*mtlsEntry{}},
	}
}

// noRedirects is a client over t that never follows a redirect.
func noRedirects(t *http.Transport) *http.Client {
	return &http.Client{
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// destinationGuard is the net.Dialer.Control that refuses forbidden
// addresses. It runs on the resolved address of every connection attempt,
// after DNS and before any packet is sent, so a name that resolves (or
// re-resolves) to a private address is refused too.
func destinationGuard() func(network, address string, c syscall.RawConn) error {
	g := ssrf.New(ssrf.WithAnyPort(), ssrf.WithDeniedV4Prefixes(extraDenied...))
	return func(network, address string, c syscall.RawConn) error {
		if err := g.Safe(network, address, c); err != nil {
			return fmt.Errorf("%w: %w", ErrForbiddenDestination, err)
		}
		return nil
	}
}

// CloseIdleConnections closes the pooled connections that are not in use.
func (s *Sender) CloseIdleConnections() {
	s.transport.CloseIdleConnections()
	s.mtls.closeIdle()
}

// Send makes one POST of r.Body to r.URL with r.Headers and
// Content-Type: application/json, and returns what happened. It never
// follows a redirect and ends within the timeout (or when ctx ends). With
// r.OAuth2 it first gets the endpoint's access token (cached; a fetch has
// a timeout of its own), and after a 401 it fetches a new one and POSTs
// once more, each step within the timeout.
func (s *Sender) Send(ctx context.Context, r Request) Result {
	start := time.Now()
	res := s.send(ctx, r)
	res.Duration = time.Since(start)
	return res
}

func (s *Sender) send(parent context.Context, r Request) Result {
	u, err := url.Parse(r.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return Result{Err: ErrInvalidURL}
	}
	where := u.Scheme + "://" + u.Host // never the path or query: they may carry the receiver's tokens
	client := s.client
	if r.ClientCert != nil && u.Scheme == "https" {
		client = s.mtls.client(r.ClientCertID, r.ClientCert, noRedirects)
	}
	if r.OAuth2 == nil {
		return s.post(parent, client, r, where, "")
	}
	token, gen, err := s.tokens.token(r.OAuth2)
	if err != nil {
		return Result{Err: err}
	}
	res := s.post(parent, client, r, where, token)
	if res.Err != nil || res.StatusCode != http.StatusUnauthorized {
		return res
	}
	// Refused: the token may have been revoked or expired early. Once
	// more, with a new one, within the same attempt.
	s.tokens.refused(r.OAuth2, gen)
	if token, _, err = s.tokens.token(r.OAuth2); err != nil {
		return Result{Err: err, TokenRefreshed: true}
	}
	res = s.post(parent, client, r, where, token)
	res.TokenRefreshed = true
	return res
}

// post makes one POST of r with client, bounded by the timeout; token, if
// not empty, is sent as a bearer token.
func (s *Sender) post(parent context.Context, client *http.Client, r Request, where, token string) Result {
	ctx, cancel := context.WithTimeout(parent, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(r.Body))
	if err != nil {
		return Result{Err: ErrInvalidURL}
	}
	for k, v := range r.Headers {
		switch strings.ToLower(k) {
		case "content-type", "content-length", "host", "transfer-encoding", "connection":
			continue // ours to set
		}
		req.Header[k] = []string{v} // as given: Standard Webhooks names are lower case
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}

	resp, err := client.Do(req)
	if err != nil {
		return Result{Err: failure(where, err, ctx, parent, s.timeout)}
	}
	defer resp.Body.Close() // without draining: a body over the cap closes the connection
	res := Result{StatusCode: resp.StatusCode}
	kept, err := io.ReadAll(io.LimitReader(ctxReader{ctx, resp.Body}, s.maxBody))
	res.Body = text(kept, int(s.maxBody))
	if err != nil {
		res.Err = failure(where, err, ctx, parent, s.timeout)
	}
	return res
}

// ctxReader ends the body read as soon as ctx is done, whatever the
// transport's own cancellation does, so even a large MaxBody read from a
// fast stream stays inside the timeout.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// failure turns a transport error into a Result error that names the
// destination's scheme and host, and the cause, but nothing the request
// carried.
func failure(where string, err error, ctx, parent context.Context, timeout time.Duration) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // url.Error repeats the full URL
	}
	// The transport's own timers (response headers) run out at the same
	// moment as ctx and may fire first: a timeout either way.
	var ne net.Error
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
	if parent.Err() == nil && timedOut {
		return fmt.Errorf("webhook POST %s: %w (%s)", where, ErrTimeout, timeout)
	}
	return fmt.Errorf("webhook POST %s: %w", where, err)
}

// text makes the kept body storable as text: valid UTF-8 (a rune cut by the
// cap is dropped, invalid bytes become U+FFFD), no NUL bytes, at most max bytes.
func text(b []byte, max int) string {
	if len(b) == 0 {
		return ""
	}
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				b = b[:i]
			}
			break
		}
	}
	s := strings.ReplaceAll(strings.ToValidUTF8(string(b), "\uFFFD"), "\x00", "")
	for len(s) > max {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// The reasons a failed attempt shows the merchant (the delivery's attempt
// log). They are a small fixed set: the error itself may name internal
// addresses, the denied range, the resolver or certificate details, which go
// only to the operator's log.
const (
	ReasonNotAllowed = "destination not allowed"
	ReasonInvalidURL = "invalid url"
	ReasonTimeout    = "timeout"
	ReasonDNS        = "dns lookup failed"
	ReasonRefused    = "connection refused"
	ReasonReset      = "connection reset"
	ReasonTLS        = "tls error"
	ReasonNetwork    = "network unreachable"
	ReasonFailed     = "connection failed"
)

// Reason maps a Result's Err to one of the fixed merchant-facing reasons;
// "" for nil.
func Reason(err error) string {
	var (
		dnsErr  *net.DNSError
		certErr *tls.CertificateVerificationError
		recErr  tls.RecordHeaderError
		alert   tls.AlertError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		ne      net.Error
	)
	var te *tokenError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &te):
		return "oauth2 token: " + te.reason
	case errors.Is(err, ErrForbiddenDestination):
		return ReasonNotAllowed
	case errors.Is(err, ErrInvalidURL):
		return ReasonInvalidURL
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return ReasonTimeout
	case errors.As(err, &dnsErr):
		return ReasonDNS
	case errors.Is(err, syscall.ECONNREFUSED):
		return ReasonRefused
	case errors.As(err, &certErr), errors.As(err, &recErr), errors.As(err, &alert),
		errors.As(err, &unknown), errors.As(err, &host), errors.As(err, &invalid),
		strings.Contains(err.Error(), "tls: "), strings.Contains(err.Error(), "HTTP response to HTTPS client"):
		return ReasonTLS
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNABORTED):
		return ReasonReset
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return ReasonNetwork
	}
	return ReasonFailed
}
