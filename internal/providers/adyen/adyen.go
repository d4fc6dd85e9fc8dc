// Package adyen is the Adyen adapter: authorizations are payments of
// Adyen's Checkout API (v71, POST /payments) with the card's details,
// captures, cancels and refunds are modifications of a payment, and
// notifications (Adyen's standard webhooks) confirm what the modifications
// did. Every request carries the caller's idempotency key in the
// Idempotency-Key header, so a retried call never moves money twice.
// Adyen's answers become the results and errors of package providers: a
// refused payment is a decline, everything that may succeed on a later try
// wraps providers.ErrUnavailable.
//
// 3-D Secure: payments are sent for Adyen's redirect flow (nativeThreeDS
// disabled). A card whose issuer asks the cardholder to authenticate comes
// back as RedirectShopper (or IdentifyShopper / ChallengeShopper) with the
// page to send the cardholder to; Authorize answers it with a result whose
// Action names that page, which sends the cardholder back to the request's
// ReturnURL with a redirectResult. Authenticate sends those values to POST
// /payments/details, whose answer is read like that of Authorize.
//
// Modifications are asynchronous at Adyen: a capture, cancel or refund is
// answered "received", which this adapter returns as a pending result whose
// reference is the modification's own pspReference. The caller settles it
// when the notification (CAPTURE, CANCELLATION, REFUND, ...) arrives; see
// Parse and VerifyHMAC. Adyen's Checkout API cannot read a payment back, so
// the Lookup methods always answer providers.ErrNoLookup.
//
// Disputes: the merchant's answer to a dispute goes to Adyen's Disputes
// API (v30), which has a base URL of its own: the evidence as one defense
// document, then the defense, or the dispute accepted.
package adyen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Name is the provider's name in requests and in the registry.
const Name = "adyen"

// DefaultBaseURL is Adyen's Checkout API v71 in the test environment. Live
// accounts have a URL of their own
// (https://{PREFIX}-checkout-live.adyenpayments.com/checkout/v71).
const DefaultBaseURL = "https://checkout-test.adyen.com/v71"

// DefaultDisputeBaseURL is Adyen's Disputes API v30 in the test
// environment. Live accounts use
// https://ca-live.adyen.com/ca/services/DisputeService/v30.
const DefaultDisputeBaseURL = "https://ca-test.adyen.com/ca/services/DisputeService/v30"

// DefaultTimeout bounds one request when the Config names no timeout.
const DefaultTimeout = 30 * time.Second

// maxBody bounds the answer read from Adyen.
const maxBody = 1 << 20

// ErrUnsupported is in the chain of the error of a request this adapter
// cannot send to Adyen (a card token: only card details are carried yet).
// Nothing was sent; the request is the caller's to refuse (a 400).
var ErrUnsupported = errors.New("adyen: not supported by the Adyen adapter")

// ErrCredentials is in the chain of the error of a request Adyen refused
// for its credentials (401, 403: the API key is wrong or lacks the
// permission, or the merchant account is not the key's). It is a
// configuration error, not the charge's: the error wraps
// providers.ErrUnavailable too, so that the charge waits (and the circuit
// breaker opens) until an operator fixes the configuration, rather than
// failing.
var ErrCredentials = errors.New("adyen: the API key or merchant account was refused")

// Config is what New needs to reach Adyen.
type Config struct {
	// APIKey is the API key of the web service user (header X-API-Key).
	APIKey string
	// MerchantAccount is the merchant account payments are made for.
	MerchantAccount string
	// BaseURL is the Checkout API's URL with its version ("" for
	// DefaultBaseURL); a mock's in tests.
	BaseURL string
	// DisputeBaseURL is the Disputes API's URL with its version ("" for
	// DefaultDisputeBaseURL); a mock's in tests.
	DisputeBaseURL string
	// HTTPClient sends the requests (nil: a new http.Client).
	HTTPClient *http.Client
	// Timeout bounds each request (0: DefaultTimeout).
	Timeout time.Duration
}

// String never prints the API key.
func (c Config) String() string {
	key := ""
	if c.APIKey != "" {
		key = "[redacted]"
	}
	return fmt.Sprintf("adyen.Config{MerchantAccount: %q, BaseURL: %q, DisputeBaseURL: %q, APIKey: %s, Timeout: %s}",
		c.MerchantAccount, c.BaseURL, c.DisputeBaseURL, key, c.Timeout)
}

// GoString never prints the API key.
func (c Config) GoString() string { return c.String() }

// Adyen is the Adyen adapter. It is safe for concurrent use.
type Adyen struct {
	apiKey      string
	merchant    string
	base        string
	disputeBase string
	client      *http.Client
	timeout     time.Duration
}

var (
	_ providers.Provider      = (*Adyen)(nil)
	_ providers.Authenticator = (*Adyen)(nil)
	_ providers.Lookup        = (*Adyen)(nil)
)

// New returns an adapter for cfg. The API key and the merchant account are
// required; BaseURL and DisputeBaseURL must be absolute http or https URLs.
func New(cfg Config) (*Adyen, error) {
	if strings.TrimSpace(cfg.APIKey) == "" {
		return nil, errors.New("adyen: an API key is required")
	}
	if strings.TrimSpace(cfg.MerchantAccount) == "" {
		return nil, errors.New("adyen: a merchant account is required")
	}
	base, err := baseURL(cfg.BaseURL, DefaultBaseURL)
	if err != nil {
		return nil, err
	}
	disputeBase, err := baseURL(cfg.DisputeBaseURL, DefaultDisputeBaseURL)
	if err != nil {
		return nil, err
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{}
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Adyen{apiKey: cfg.APIKey, merchant: cfg.MerchantAccount, base: base, disputeBase: disputeBase, client: client, timeout: timeout}, nil
}

// baseURL is base ("" for def) without its trailing slashes, or an error
// when it is not an absolute http(s) URL without credentials, query or
// fragment.
func baseURL(base, def string) (string, error) {
	if base == "" {
		base = def
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("adyen: the base URL %q is not an absolute http(s) URL without credentials, query or fragment", base)
	}
	return strings.TrimRight(base, "/"), nil
}

// Name returns "adyen".
func (a *Adyen) Name() string { return Name }

// String never prints the API key.
func (a *Adyen) String() string {
	return fmt.Sprintf("adyen.Adyen{MerchantAccount: %q, BaseURL: %q, DisputeBaseURL: %q, APIKey: [redacted]}", a.merchant, a.base, a.disputeBase)
}

// GoString never prints the API key.
func (a *Adyen) GoString() string { return a.String() }

// serviceError is Adyen's error body (ServiceError).
type serviceError struct {
	Status       int    `json:"status"`
	ErrorCode    string `json:"errorCode"`
	Message      string `json:"message"`
	ErrorType    string `json:"errorType"`
	PSPReference string `json:"pspReference"`
}

// errInProgress is Adyen's errorCode for a request whose idempotency key
// belongs to a request still being processed.
const errInProgress = "704"

// post sends body to path of the Checkout API with the idempotency key
// and decodes a 2xx answer into out (see send).
func (a *Adyen) post(ctx context.Context, path, key string, body, out any, hide ...string) error {
	return a.send(ctx, a.base, path, key, body, out, hide...)
}

// send sends body to path under base with the idempotency key ("": none)
// and decodes a 2xx answer into out. Strings of hide (the card data of
// the request) never reach an error's text. The error is:
//
//   - a *providers.Decline invalid_request for 400 and 422 (Adyen refused
//     the request itself; sending it again cannot help), except errorCode
//     704 (the key's first request is still in progress);
//   - ErrCredentials and providers.ErrUnavailable for 401 and 403;
//   - providers.ErrUnavailable for everything else: 5xx, 409, 429, other
//     statuses, a 2xx that cannot be read, timeouts and network errors,
//     with providers.ErrNotSent too when no byte of the request was
//     written (the connection was refused).
func (a *Adyen) send(ctx context.Context, base, path, key string, body, out any, hide ...string) error {
	payload, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("adyen: encoding the request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	tctx, wrote := traceWrites(ctx)
	req, err := http.NewRequestWithContext(tctx, http.MethodPost, base+path, bytes.NewReader(payload))
	if err != nil {
		return fmt.Errorf("adyen: building the request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-API-Key", a.apiKey)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := a.client.Do(req)
	if err != nil {
		err = fmt.Errorf("%w: adyen: POST %s: %s", providers.ErrUnavailable, path, scrub(err.Error(), hide))
		if !wrote() {
			err = fmt.Errorf("%w: %w", err, providers.ErrNotSent)
		}
		return err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%w: adyen: POST %s: reading the answer (status %d): %s", providers.ErrUnavailable, path, res.StatusCode, scrub(err.Error(), hide))
	}
	if res.StatusCode >= 200 && res.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%w: adyen: POST %s: unreadable answer (status %d): %v", providers.ErrUnavailable, path, res.StatusCode, err)
		}
		return nil
	}
	var se serviceError
	_ = json.Unmarshal(data, &se) // an unreadable body leaves it empty
	msg := scrub(se.Message, hide)
	switch {
	case res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden:
		// The message may quote what was refused; say only what it was.
		return fmt.Errorf("%w: %w: POST %s: status %d, error %s (%s)", providers.ErrUnavailable, ErrCredentials, path, res.StatusCode, se.ErrorCode, se.ErrorType)
	case (res.StatusCode == http.StatusBadRequest || res.StatusCode == http.StatusUnprocessableEntity) && se.ErrorCode != errInProgress:
		if msg == "" {
			msg = "Adyen refused the request."
		}
		return &providers.Decline{Code: "invalid_request", Message: fmt.Sprintf("%s (Adyen error %s)", msg, se.ErrorCode)}
	}
	return fmt.Errorf("%w: adyen: POST %s: status %d, error %s (%s, psp %s): %s",
		providers.ErrUnavailable, path, res.StatusCode, se.ErrorCode, se.ErrorType, se.PSPReference, msg)
}

// traceWrites returns ctx with a trace of the HTTP requests written under
// it, and a function that reports whether any was, even in part: a request
// never written (the dial was refused, no connection was free) never
// reached Adyen. Go's transport may replay a request carrying an
// Idempotency-Key on a new connection; every write counts.
func traceWrites(ctx context.Context) (context.Context, func() bool) {
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) },
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) }}
	return httptrace.WithClientTrace(ctx, trace), wrote.Load
}

// scrub replaces every non-empty string of hide in s.
func scrub(s string, hide []string) string {
	for _, h := range hide {
		if h != "" {
			s = strings.ReplaceAll(s, h, "[redacted]")
		}
	}
	return s
}
