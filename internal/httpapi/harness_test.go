package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/cache"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/customers"
	"github.com/gatehouse-pay/gatehouse/internal/disputes"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/eventtypes"
	"github.com/gatehouse-pay/gatehouse/internal/httpapi"
	"github.com/gatehouse-pay/gatehouse/internal/jobs"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/ledger"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
	"github.com/gatehouse-pay/gatehouse/internal/metrics"
	"github.com/gatehouse-pay/gatehouse/internal/mfa"
	"github.com/gatehouse-pay/gatehouse/internal/notifications"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
	"github.com/gatehouse-pay/gatehouse/internal/ratelimit"
	"github.com/gatehouse-pay/gatehouse/internal/reconcile"
	"github.com/gatehouse-pay/gatehouse/internal/refunds"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

const testJWTSecret = "0123456789abcdef0123456789abcdef-test"

// testParallel is how many tests run at once when go test is not given
// -parallel: four per core, at least 8. Every test has its own database and
// Redis server, and spends most of its time waiting: on rate-limit windows,
// retries and timeouts, not on the CPU.
func testParallel() int { return max(8, 4*runtime.GOMAXPROCS(0)) }

func TestMain(m *testing.M) {
	flag.Parse()
	testenv.DefaultParallel(testParallel())
	os.Exit(m.Run())
}

// harness is one API instance on a fresh database and a Redis server of its
// own (testenv.PrivateRedis), so that tests run in parallel.
type harness struct {
	// confirmedCode is the TOTP code enrollMFA last confirmed with.
	confirmedCode string
	t             *testing.T
	app           *fiber.App
	hub           *events.Hub
	base          string
	db            testenv.DB
	redisURL      string // the harness's own Redis (a replica's: the first one's)
	rdb           redis.UniversalClient
	spec          *testenv.Spec
	merchants     *merchants.Service
	cfg           config.Config
}

func testConfig(t *testing.T, mutate func(map[string]string)) config.Config {
	t.Helper()
	env := map[string]string{
		"JWT_SECRET":     testJWTSecret,
		"ENCRYPTION_KEY": strings.Repeat("ab", 32),
		// Tests register receivers on 127.0.0.1; a test of the production
		// default deletes this (see strictWebhookURLs in webhooks_test.go).
		"WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
	}
	if mutate != nil {
		mutate(env)
	}
	cfg, err := config.Load(func(k string) string { return env[k] }, config.Needs{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newHarness(t *testing.T, mutateEnv func(map[string]string)) *harness {
	t.Helper()
	return newHarnessWith(t, harnessOptions{env: mutateEnv})
}

// harnessOptions vary the API a harness starts.
type harnessOptions struct {
	env func(map[string]string)
	// replicaOf, when set, makes this harness a second replica of that one:
	// the same database and Redis.
	replicaOf *harness
	// redisURL is the Redis the API talks to; the harness's own when "".
	redisURL string
	// keyStore, when set, wraps the store the key service uses.
	keyStore func(apikeys.Store) apikeys.Store
}

func newHarnessWith(t *testing.T, o harnessOptions) *harness {
	t.Helper()
	cfg := testConfig(t, o.env)
	var db testenv.DB
	var own string
	if o.replicaOf != nil {
		db, own = o.replicaOf.db, o.replicaOf.redisURL
	} else {
		db, own = testenv.NewDB(t), testenv.PrivateRedis(t)
	}
	url := o.redisURL
	if url == "" {
		url = own
	}
	// go-redis' default timeouts rather than the API's 500 ms: on a loaded
	// test machine a slow answer would switch the limiter to its local
	// fallback and make exact rate-limit counts flaky.
	rdb, err := cache.DialQueue(url, "single")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := metrics.NewRegistry()
	st := store.New(db.Pool)
	rc := cache.New(rdb)
	hasher := auth.NewTestHasher(2)
	tokens := auth.NewTokens([]byte(cfg.JWTSecret.Reveal()), cfg.JWTIssuer, cfg.JWTAudience, time.Now)
	ms := merchants.NewService(st, hasher, time.Now)
	keys, err := keyring.New(cfg.EncryptionKey)
	if err != nil {
		t.Fatal(err)
	}
	queue := jobs.NewQueue(asynq.NewClientFromRedisClient(rdb), nil, cfg)
	var keyStore apikeys.Store = st
	if o.keyStore != nil {
		keyStore = o.keyStore(st)
	}
	hub := events.NewHub(st, 20*time.Millisecond, events.Limits{
		Total: cfg.EventStreamMax, PerMerchant: cfg.EventStreamMaxPerMerchant, PerCredential: cfg.EventStreamMaxPerKey}, log)
	hubCtx, stopHub := context.WithCancel(context.Background())
	go hub.Run(hubCtx)
	// Connectors and routing as the API's (cmd/api): charges are routed from
	// the directory, which change notices over Redis keep fresh.
	notices := cache.NewNotices(rdb, cache.RoutingChannel)
	directory := connectors.NewDirectory(st, notices, cfg.Providers(), cfg.DefaultProvider, 0, time.Now)
	go notices.Listen(hubCtx, directory.Forget, directory.ForgetAll, log)
	// The charges service as the API's (cmd/api): customers, challenges and routing too.
	conns := connectors.NewService(st, keys, directory, cfg.Providers(), time.Now).WithPublicURL(cfg.PublicURL)
	chargeService := charges.NewService(st, queue, keys, cfg.Providers(), cfg.DefaultProvider, time.Now, nil).WithTokens(st).
		WithCustomers(st).WithChallenges(st, charges.NewLinks(cfg.PublicURL, keys)).
		WithRouter(directory, cfg.RoutingMaxAttempts)
	app := httpapi.NewServer(httpapi.Deps{
		Config:     cfg,
		Log:        log,
		Auth:       auth.NewService(st, st, rc, hasher, tokens, time.Now, log),
		Keys:       apikeys.NewService(keyStore, rc, time.Now, log),
		KeyCache:   rc,
		Merchants:  ms,
		Members:    members.NewService(st, hasher, time.Now),
		MFA:        mfa.NewService(st, keys, time.Now),
		Charges:    chargeService,
		Refunds:    refunds.NewService(st, queue, time.Now, nil),
		Customers:  customers.NewService(st, keys, time.Now),
		Connectors: conns,
		Ledger:     ledger.NewService(st, conns.Payee, queue, time.Now, cfg.SandboxPayoutDelay, nil),
		Disputes:   disputes.NewService(st, nil, queue, time.Now, slog.New(slog.DiscardHandler), nil),
		Reconcile:  reconcile.NewService(st, conns.GetAny, sandboxReports(st, cfg), time.Now),
		Notifications: notifications.NewReceiver(st, keys, queue, string(cfg.StripeWebhookSecret), time.Now, nil).
			WithMetrics(notifications.NewMetrics(reg)),
		Events:         events.NewService(st, time.Now),
		Webhooks:       webhooks.NewService(st, queue, keys, cfg.WebhookAllowPrivateNetworks, time.Now, nil).WithFilterPaths(eventtypes.HasPath),
		AuditLog:       st,
		Stream:         hub,
		Keyring:        keys,
		Limiter:        ratelimit.New(rdb, ratelimit.NewMetrics(reg), log),
		Metrics:        metrics.NewHTTP(reg),
		MetricsHandler: metrics.Handler(reg),
		Checks: map[string]func(context.Context) error{
			"postgres": st.Ping,
			"redis":    func(ctx context.Context) error { return rdb.Ping(ctx).Err() },
		},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	t.Cleanup(func() { _ = app.ShutdownWithTimeout(5 * time.Second) })
	t.Cleanup(func() { stopHub(); hub.Close() }) // first: open streams end before the server stops
	return &harness{t: t, app: app, hub: hub, base: "http://" + ln.Addr().String(), db: db, redisURL: own, rdb: rdb, spec: testenv.LoadSpec(t), merchants: ms, cfg: cfg}
}

var client = &http.Client{Timeout: 15 * time.Second}

// sandboxReports is cmd/api's settlement report fetch for sandbox
// connectors (the harness has no Stripe).
func sandboxReports(st *store.Store, cfg config.Config) reconcile.Fetch {
	sb := sandbox.New(st.SandboxLedger(), sandbox.Options{})
	return func(ctx context.Context, c connectors.Connector, from, to time.Time) ([]providers.SettlementLine, error) {
		if c.Provider != connectors.ProviderSandbox {
			return nil, reconcile.ErrNoReport
		}
		fees := c.FeeSchedule()
		return sb.Settled(ctx, c.ID, sandbox.Terms{Fee: func(amount int64) int64 { return fees.For(amount).Amount },
			Delay: cfg.SandboxSettlementDelay}, from, to)
	}
}

// clientFrom returns an HTTP client whose connections leave from the
// loopback address ip (any of 127.0.0.0/8), so per-address limits see it as
// its own client.
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

// response is one answer, its body decoded when it is JSON.
type response struct {
	status int
	header http.Header
	raw    []byte
	body   map[string]any
}

// errCode returns error.code of an error body, or "".
func (r response) errCode() string {
	e, _ := r.body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func (r response) errField(name string) string {
	e, _ := r.body["error"].(map[string]any)
	v, _ := e[name].(string)
	return v
}

// do sends a request through the app and validates the answer against the
// OpenAPI spec. headers are name, value pairs.
func (h *harness) do(method, path, body string, headers ...string) response {
	h.t.Helper()
	return h.doWith(client, method, path, body, headers...)
}

// doWith is do through c, for instance a client from another address.
func (h *harness) doWith(c *http.Client, method, path, body string, headers ...string) response {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, h.base+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	h.spec.Check(h.t, req, resp, raw)
	r := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &r.body); err != nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			h.t.Fatalf("%s %s: body is not JSON: %s", method, path, raw)
		}
	}
	return r
}

func bearer(token string) []string { return []string{"Authorization", "Bearer " + token} }

// want fails the test unless r has the status and, when code is set, the error code.
func want(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status || (code != "" && r.errCode() != code) {
		t.Fatalf("got %d %s, want %d %s\nbody: %s", r.status, r.errCode(), status, code, r.raw)
	}
}

// merchant creates a merchant and returns its id.
func (h *harness) merchant(email, password string) string {
	h.t.Helper()
	m, err := h.merchants.Create(context.Background(), email, password, "Test "+email)
	if err != nil {
		h.t.Fatal(err)
	}
	return m.ID
}

// login returns a session token.
func (h *harness) login(email, password string) string {
	h.t.Helper()
	r := h.do("POST", "/v1/auth/login", `{"email":"`+email+`","password":"`+password+`"}`)
	want(h.t, r, 200, "")
	return r.body["token"].(string)
}

// newKey creates a key with a session token and returns its id and secret.
func (h *harness) newKey(token string) (id, secret string) {
	h.t.Helper()
	r := h.do("POST", "/v1/me/api_keys", "", bearer(token)...)
	want(h.t, r, 201, "")
	return r.body["id"].(string), r.body["secret_key"].(string)
}

// account is a merchant signed in with one key.
type account struct {
	merchantID, token, keyID, secret string
}

func (h *harness) account(email string) account {
	h.t.Helper()
	a := account{merchantID: h.merchant(email, "correct horse battery")}
	a.token = h.login(email, "correct horse battery")
	a.keyID, a.secret = h.newKey(a.token)
	return a
}

// burst sends n requests at once (all released together) and returns the
// answers in order; a transport error fails the test.
func burst(t *testing.T, n int, send func(i int) (response, error)) []response {
	t.Helper()
	answers := make([]response, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = send(i)
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return answers
}
