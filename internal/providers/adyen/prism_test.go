package adyen_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/adyen"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// A Prism mock of one of Adyen's APIs, shared by the package's tests:
// started by the first test that needs it, stopped by TestMain. Prism
// answers from the description's named examples and validates each
// request against it: a request body Adyen would refuse gets a 422.
type prismMock struct {
	spec string // the description's file in shared/third_party/adyen-openapi
	once sync.Once
	proc *harness.Process
	url  string
	err  error
}

// The mocks of the Checkout API v71 and of the Disputes API v30.
var (
	prism         = &prismMock{spec: "CheckoutService-v71.json"}
	disputesPrism = &prismMock{spec: "DisputeService-v30.json"}
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, p := range []*prismMock{prism, disputesPrism} {
		if p.proc != nil {
			p.proc.Stop(os.Interrupt, 5*time.Second)
			if code != 0 {
				fmt.Fprintf(os.Stderr, "---- prism %s output (tail) ----\n%s\n---- end of prism output ----\n", p.spec, p.proc.Tail(16<<10))
			}
		}
	}
	os.Exit(code)
}

func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	testenv.Missing(t, format, args...)
}

// prismBinary finds prism: on PATH (bin/tools under testenv.sh), else in
// the checkout's bin/tools or the npm folder deploy/local/tools.sh installs.
func prismBinary() (string, error) {
	if p, err := exec.LookPath("prism"); err == nil {
		return p, nil
	}
	root, err := harness.ModuleRoot()
	if err != nil {
		return "", err
	}
	for _, p := range []string{
		filepath.Join(root, "bin", "tools", "prism"),
		filepath.Join(root, "internal", "providers", "adyen", "testdata", "prism", "node_modules", ".bin", "prism"),
	} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", errors.New("prism is not installed (deploy/local/tools.sh installs it into bin/tools)")
}

// prismURL returns the base URL of a running Prism mock of Adyen's
// Checkout API v71. When prism or the description is missing the test is
// skipped, or fails under GATEHOUSE_REQUIRE_SERVICES=1 and in CI.
func prismURL(t *testing.T) string {
	t.Helper()
	return prism.URL(t)
}

// URL returns the base URL of the running mock, starting it first (see
// prismURL).
func (pm *prismMock) URL(t *testing.T) string {
	t.Helper()
	pm.once.Do(func() { pm.url, pm.err = pm.start() })
	if pm.err != nil {
		missing(t, "prism %s: %v", pm.spec, pm.err)
	}
	return pm.url
}

func (pm *prismMock) start() (string, error) {
	bin, err := prismBinary()
	if err != nil {
		return "", err
	}
	spec, err := thirdPartyPath(pm.spec)
	if err != nil {
		return "", fmt.Errorf("Adyen's API description %s: %w", pm.spec, err)
	}
	out := new(harness.Output)
	port, err := harness.OnFreePort(func(port int) error {
		p, err := harness.Start("prism", harness.Command(os.Environ(), bin, "mock", "-p", strconv.Itoa(port), "-h", "127.0.0.1", spec), out)
		if err != nil {
			return err
		}
		addr := harness.Loopback(port)
		if err := harness.WaitFor(context.Background(), p, 60*time.Second, 100*time.Millisecond, harness.Listening(addr)); err != nil {
			p.Stop(os.Interrupt, 5*time.Second)
			if p.AddrInUse() {
				return fmt.Errorf("%w: %v", harness.ErrAddrInUse, err)
			}
			return fmt.Errorf("prism on %s: %v\n%s", addr, err, p.Tail(4<<10))
		}
		pm.proc = p
		return nil
	})
	if err != nil {
		return "", err
	}
	return "http://" + harness.Loopback(port), nil
}

// exampleKey carries the name of the description's example a request asks
// Prism for (Prefer: example=NAME) or the status it asks for (Prefer:
// code=NNN).
type exampleKey struct{}

func prefer(ctx context.Context, value string) context.Context {
	return context.WithValue(ctx, exampleKey{}, value)
}

// preferTransport adds the Prefer header a request's context names and
// records the Idempotency-Key of every request.
type preferTransport struct {
	mu   sync.Mutex
	keys []string
}

func (p *preferTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if v, ok := req.Context().Value(exampleKey{}).(string); ok {
		req = req.Clone(req.Context())
		req.Header.Set("Prefer", v)
	}
	p.mu.Lock()
	p.keys = append(p.keys, req.Header.Get("Idempotency-Key"))
	p.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (p *preferTransport) lastKey() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.keys) == 0 {
		return ""
	}
	return p.keys[len(p.keys)-1]
}

func prismAdyen(t *testing.T) (*adyen.Adyen, *preferTransport) {
	t.Helper()
	base := prismURL(t)
	tr := &preferTransport{}
	a, err := adyen.New(adyen.Config{APIKey: apiKey, MerchantAccount: merchant, BaseURL: base,
		HTTPClient: &http.Client{Transport: tr}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return a, tr
}

// TestPrismAuthorize drives Authorize through Prism: each request must pass
// Prism's validation against Adyen's description (a 422 would come back as
// a decline invalid_request), and each of the description's examples must
// be read as its result code says.
func TestPrismAuthorize(t *testing.T) {
	a, tr := prismAdyen(t)
	tests := []struct {
		name    string
		prefer  string
		edit    func(*providers.AuthorizeRequest)
		outcome string
	}{
		{"authorised, manual capture", "example=card-direct", func(*providers.AuthorizeRequest) {}, "ok:993617895204576J"},
		{"authorised, captured at once", "example=card-direct", func(r *providers.AuthorizeRequest) { r.Capture = true }, "ok:993617895204576J"},
		{"authorised off session", "example=card-direct", func(r *providers.AuthorizeRequest) { r.OffSession, r.Card.CVC = true, "" }, "ok:993617895204576J"},
		{"authorised in JPY", "example=card-direct", func(r *providers.AuthorizeRequest) { r.Amount, r.Currency = 1500, "JPY" }, "ok:993617895204576J"},
		{"authorised in KWD", "example=card-direct", func(r *providers.AuthorizeRequest) { r.Amount, r.Currency = 1250, "KWD" }, "ok:993617895204576J"},
		{"3-D Secure redirect", "example=card-3d-secure-redirect", func(*providers.AuthorizeRequest) {},
			"action:JLCMPCQ8HXSKGK82:https://checkoutshopper-test.adyen.com/checkoutshopper/threeDS/redirect..."},
		{"3-D Secure redirect off session", "example=card-3d-secure-redirect", func(r *providers.AuthorizeRequest) { r.OffSession = true }, "decline:authentication_required"},
		{"native 3-D Secure 2: no page to send the cardholder to", "example=card-3d-secure-2-web", func(*providers.AuthorizeRequest) {}, "decline:authentication_required"},
		{"validation error", "code=422", func(*providers.AuthorizeRequest) {}, "decline:invalid_request"},
		{"bad request", "code=400", func(*providers.AuthorizeRequest) {}, "decline:invalid_request"},
		{"unauthorized", "code=401", func(*providers.AuthorizeRequest) {}, "credentials"},
		{"forbidden", "code=403", func(*providers.AuthorizeRequest) {}, "credentials"},
		{"server error", "code=500", func(*providers.AuthorizeRequest) {}, "unavailable"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := authorizeRequest()
			r.IdempotencyKey = fmt.Sprintf("gh_ch_%d_authorize", i)
			tt.edit(&r)
			res, err := a.Authorize(prefer(context.Background(), tt.prefer), r)
			if got := outcome(res, err); got != tt.outcome {
				t.Errorf("got %s, want %s (err %v)", got, tt.outcome, err)
			}
			if got := tr.lastKey(); got != r.IdempotencyKey {
				t.Errorf("Idempotency-Key %q, want %q", got, r.IdempotencyKey)
			}
		})
	}
}

// TestPrismBodiesPassValidation sends what Prism answers from its first
// 200 example when no example is named: every request the adapter makes
// must be valid for Adyen's description.
func TestPrismBodiesPassValidation(t *testing.T) {
	a, _ := prismAdyen(t)
	ctx := context.Background()
	r := authorizeRequest()
	if _, err := a.Authorize(ctx, r); err != nil {
		if d, ok := providers.AsDecline(err); ok && d.Code == "invalid_request" {
			t.Errorf("Prism refused the payment request: %v", err)
		}
	}
	checks := map[string]func() (providers.Result, error){
		"details": func() (providers.Result, error) {
			return a.Authenticate(ctx, providers.AuthenticateRequest{IdempotencyKey: "gh_ch_1_authenticate", Details: map[string]string{"redirectResult": "X6XtfGC3!Y"}})
		},
		"capture": func() (providers.Result, error) {
			return a.Capture(ctx, providers.CaptureRequest{IdempotencyKey: "gh_ch_1_capture", Reference: "993617894903480A", Amount: 2000, Currency: "EUR"})
		},
		"cancel": func() (providers.Result, error) {
			return a.Void(ctx, providers.VoidRequest{IdempotencyKey: "gh_ch_1_void", Reference: "993617894903480A"})
		},
		"refund": func() (providers.Result, error) {
			return a.Refund(ctx, providers.RefundRequest{IdempotencyKey: "gh_re_1", Reference: "993617894903480A", Amount: 2500, Currency: "EUR", Reason: "duplicate", RefundID: "re_1"})
		},
	}
	for name, do := range checks {
		if _, err := do(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestPrismAuthenticate(t *testing.T) {
	a, tr := prismAdyen(t)
	r := providers.AuthenticateRequest{IdempotencyKey: "gh_ch_9_authenticate", Reference: "JLCMPCQ8HXSKGK82", Answer: providers.AnswerReturned,
		Details: map[string]string{"redirectResult": "X6XtfGC3!Y...", "charge": "ch_9"}}
	res, err := a.Authenticate(prefer(context.Background(), "example=00.redirect"), r)
	if got := outcome(res, err); got != "ok:V4HZ4RBFJGXXGN82" {
		t.Errorf("got %s, want ok:V4HZ4RBFJGXXGN82 (err %v)", got, err)
	}
	if got := tr.lastKey(); got != r.IdempotencyKey {
		t.Errorf("Idempotency-Key %q, want %q", got, r.IdempotencyKey)
	}
	res, err = a.Authenticate(prefer(context.Background(), "code=500"), r)
	if got := outcome(res, err); got != "unavailable" {
		t.Errorf("500: got %s, want unavailable", got)
	}
}

func TestPrismModifications(t *testing.T) {
	a, tr := prismAdyen(t)
	ctx := context.Background()
	tests := []struct {
		name    string
		prefer  string
		key     string
		do      func(ctx context.Context) (providers.Result, error)
		outcome string
	}{
		{"capture", "example=capture", "gh_ch_1_capture", func(ctx context.Context) (providers.Result, error) {
			return a.Capture(ctx, providers.CaptureRequest{IdempotencyKey: "gh_ch_1_capture", Reference: "993617894903480A", Amount: 2000, Currency: "EUR"})
		}, "pending:993617894906488A"},
		{"partial capture in ISK", "example=capture", "gh_ch_2_capture", func(ctx context.Context) (providers.Result, error) {
			return a.Capture(ctx, providers.CaptureRequest{IdempotencyKey: "gh_ch_2_capture", Reference: "993617894903480A", Amount: 700, Currency: "ISK"})
		}, "pending:993617894906488A"},
		{"void", "example=cancel-with-psp-reference", "gh_ch_1_void", func(ctx context.Context) (providers.Result, error) {
			return a.Void(ctx, providers.VoidRequest{IdempotencyKey: "gh_ch_1_void", Reference: "993617894903480A"})
		}, "pending:993617894906488A"},
		{"refund", "example=refund", "gh_re_1", func(ctx context.Context) (providers.Result, error) {
			return a.Refund(ctx, providers.RefundRequest{IdempotencyKey: "gh_re_1", Reference: "993617894903480A", Amount: 2500, Currency: "EUR", Reason: "requested_by_customer", RefundID: "re_1"})
		}, "pending:993617894906488A"},
		{"refund refused", "code=422", "gh_re_2", func(ctx context.Context) (providers.Result, error) {
			return a.Refund(ctx, providers.RefundRequest{IdempotencyKey: "gh_re_2", Reference: "993617894903480A", Amount: 2500, Currency: "EUR", RefundID: "re_2"})
		}, "decline:invalid_request"},
		{"capture, server error", "code=500", "gh_ch_3_capture", func(ctx context.Context) (providers.Result, error) {
			return a.Capture(ctx, providers.CaptureRequest{IdempotencyKey: "gh_ch_3_capture", Reference: "993617894903480A", Amount: 2000, Currency: "EUR"})
		}, "unavailable"},
		{"void, key refused", "code=401", "gh_ch_4_void", func(ctx context.Context) (providers.Result, error) {
			return a.Void(ctx, providers.VoidRequest{IdempotencyKey: "gh_ch_4_void", Reference: "993617894903480A"})
		}, "credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := tt.do(prefer(ctx, tt.prefer))
			if got := outcome(res, err); got != tt.outcome {
				t.Errorf("got %s, want %s (err %v)", got, tt.outcome, err)
			}
			if got := tr.lastKey(); got != tt.key {
				t.Errorf("Idempotency-Key %q, want %q", got, tt.key)
			}
		})
	}
}
