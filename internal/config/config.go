// Package config loads Gatehouse's settings from the environment.
//
// Each setting is declared once, as a field of Config: its variable, its
// default and the values it accepts are struct tags, read by
// github.com/caarlos0/env and by the checks of this package; what it means
// is the field's doc comment. docs/settings.md is generated from both
// (go generate ./internal/config, or make settings-doc).
//
// Load reads every variable, collects every problem at once and reports them
// in one line, so an operator fixes a bad deployment in one round. Secrets
// are held in the Secret type, which never prints its value.
package config

import (
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"time"
)

//go:generate go test -run TestSettingsDoc -update .

// Secret is a string that never prints its value through fmt or slog.
type Secret string

// String hides the value.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString hides the value from %#v.
func (s Secret) GoString() string { return s.String() }

// LogValue hides the value from slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// Reveal returns the value; call it only where the secret is used.
func (s Secret) Reveal() string { return string(s) }

// Limit is a rate limit: at most N requests in any trailing Window.
type Limit struct {
	N      int
	Window time.Duration
}

// String renders the limit in the form it is configured, e.g. "100/1m0s".
func (l Limit) String() string { return fmt.Sprintf("%d/%s", l.N, l.Window) }

// UnmarshalText parses the limit as ParseLimit does.
func (l *Limit) UnmarshalText(text []byte) error {
	v, err := ParseLimit(string(text))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// ParseLimit parses "N/duration" such as "100/1m" or "10/5m".
func ParseLimit(s string) (Limit, error) {
	n, w, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Limit{}, fmt.Errorf("want N/duration such as 100/1m, got %q", s)
	}
	count, err := strconv.Atoi(n)
	if err != nil || count < 1 {
		return Limit{}, fmt.Errorf("want a positive count before '/', got %q", s)
	}
	window, err := time.ParseDuration(w)
	if err != nil || window < time.Second {
		return Limit{}, fmt.Errorf("want a window of at least 1s after '/', got %q", s)
	}
	return Limit{N: count, Window: window}, nil
}

// Config holds every setting of both binaries, in the groups of
// docs/settings.md. Each field is one environment variable; its tags say
// what it accepts (load.go says what each tag means) and its doc comment,
// written for operators, is its description in docs/settings.md.
type Config struct {
	// PostgreSQL, `postgres://user:pass@host:5432/db?sslmode=...`; it may
	// hold a password.
	DatabaseURL Secret `env:"DATABASE_URL" group:"PostgreSQL" by:"api,worker,migrate,merchant create,audit verify" needs:"Database" hint:"e.g. postgres://user@127.0.0.1:5432/gatehouse" scheme:"postgres,postgresql"`
	// The client-side deadline of every statement (sent, run, its rows
	// read) and of the ping of a pooled connection that sat idle; also the
	// server's `statement_timeout` (except under
	// `DATABASE_POOL_MODE=transaction`, where the server's own setting
	// holds). A primary that drops off the network without a reset (packets
	// vanish) fails the statement after it, with `503 service_unavailable`,
	// instead of leaving it waiting minutes for TCP to give up; the
	// connection is dropped and a new one opened when the network is back.
	// Taking a connection from the pool is bounded by this plus
	// `DATABASE_CONNECT_TIMEOUT`. Keep it above `lock_timeout` (3 s), so a
	// row lock ends in 409 rather than 503. The subcommands set no statement
	// deadline.
	DatabaseStatementTimeout time.Duration `env:"DATABASE_STATEMENT_TIMEOUT" envDefault:"5s" min:"100ms" by:"api,worker"`
	// Opening one PostgreSQL connection, TLS and authentication included;
	// with several hosts in `DATABASE_URL`, per host.
	DatabaseConnectTimeout time.Duration `env:"DATABASE_CONNECT_TIMEOUT" envDefault:"5s" min:"100ms" by:"api,worker,migrate,merchant create,audit verify"`
	// A hot standby of `DATABASE_URL` (streaming replication),
	// `postgres://...`; it may hold a password. Empty: every read on the
	// primary. The list endpoints (every `GET` that answers a list) and the
	// dashboard's list pages read it while it is at most
	// `DATABASE_READ_MAX_LAG` behind; reads of one object, answers to writes
	// and the worker stay on the primary. Down, failing a read, or further
	// behind: the primary serves the list
	// (`gatehouse_db_read_fallbacks_total`). Not checked at start. See
	// [Read replica](scaling.md#read-replica).
	DatabaseReadURL Secret `env:"DATABASE_READ_URL" by:"api" scheme:"postgres,postgresql"`
	// How far behind the primary the standby of `DATABASE_READ_URL` may be
	// and still serve lists; measured every quarter of it (at most every
	// second).
	DatabaseReadMaxLag time.Duration `env:"DATABASE_READ_MAX_LAG" envDefault:"5s" min:"1s" by:"api"`
	// `transaction` when `DATABASE_URL` (and `DATABASE_READ_URL`) go
	// through PgBouncer with `pool_mode = transaction`: statements use no
	// named prepared statement (pgx `cache_describe`, unless `DATABASE_URL`
	// sets `default_query_exec_mode`) and no setting is sent at connection
	// start, so `lock_timeout` and `statement_timeout` must come from the
	// server. `migrate` refuses it. See [PgBouncer](scaling.md#pgbouncer).
	DatabasePoolMode string `env:"DATABASE_POOL_MODE" envDefault:"session" oneof:"session,transaction" by:"api,worker,migrate,merchant create,audit verify"`

	// Redis, `redis://` or `rediss://`; its form depends on `REDIS_MODE`.
	// It may hold a password.
	RedisURL Secret `env:"REDIS_URL" group:"Redis" by:"api,worker" needs:"Redis" hint:"e.g. redis://127.0.0.1:6379/0" scheme:"redis,rediss"`
	// How `REDIS_URL` is read. `single`: `redis://[:password@]host:6379/0`;
	// `sentinel`:
	// `redis://[:password@]sentinel-0:26379?master_name=NAME&addr=sentinel-1:26379&addr=sentinel-2:26379`
	// (the user-info password goes to the sentinels and the master; when
	// only the master has one, give it as `&password=...` instead);
	// `cluster`: `redis://[:password@]node-0:6379?addr=node-1:6379&addr=node-2:6379`
	// (seed nodes).
	RedisMode string `env:"REDIS_MODE" envDefault:"single" oneof:"single,sentinel,cluster" by:"api,worker"`

	// The HS256 key of session tokens; rotating it signs everyone out. Taken
	// as given: spaces around it are part of it.
	JWTSecret Secret `env:"JWT_SECRET" group:"Keys and sign-in" by:"api" needs:"JWT" minLen:"32" verbatim:"true"`
	// The AES-256-GCM key of card data and webhook secrets.
	EncryptionKey []byte `env:"ENCRYPTION_KEY" by:"api,worker" needs:"Encryption" secret:"true"`
	// The issuer claim stamped into and required of session tokens;
	// changing it signs every dashboard session out.
	JWTIssuer string `env:"JWT_ISSUER" envDefault:"gatehouse" by:"api"`
	// The audience claim stamped into and required of session tokens;
	// changing it signs every dashboard session out.
	JWTAudience string `env:"JWT_AUDIENCE" envDefault:"gatehouse-dashboard" by:"api"`
	// Password hashes (argon2id, 19 MiB and ~20 ms of a core each) computed
	// at once; the rest of the CPU stays with payments during a login flood.
	// A sign-in that finds every slot taken for 1 s is refused with 503
	// `service_unavailable` and `Retry-After: 1` instead of queueing.
	MaxConcurrentHashes int `env:"MAX_CONCURRENT_HASHES" min:"1" docDefault:"half of GOMAXPROCS (the container's CPU limit), at least 1" by:"api"`

	// The API's listen address: `/v1/...`, the dashboard, `/healthz`,
	// `/readyz`, and `/metrics` unless `API_METRICS_ADDR` is set. Port 0,
	// here and in the other `*_ADDR` settings, takes any free port, which
	// the process logs at start (`api listening`, `addr`).
	HTTPAddr string `env:"HTTP_ADDR" envDefault:":8080" group:"Listeners and HTTP" check:"addr" by:"api"`
	// When set (e.g. `:9090`), `/metrics` is served on this address only
	// and `HTTP_ADDR` answers it `404 not_found`, so the public port never
	// shows metrics; empty keeps `/metrics` on `HTTP_ADDR`. Must differ from
	// `HTTP_ADDR` (two with port 0 differ). Not `METRICS_ADDR`, which the
	// worker reads: local runs give both binaries one environment. The
	// Kubernetes manifests use `:9090`.
	APIMetricsAddr string `env:"API_METRICS_ADDR" check:"addr" by:"api"`
	// When set (e.g. `:8081`), `/healthz` and `/readyz` are also served on
	// this address, answered as on `HTTP_ADDR` (same checks, `?exclude=`,
	// draining) and outside `HTTP_MAX_CONNS`, so the kubelet's probes
	// answer while clients hold every connection of the public port. Must
	// differ from `HTTP_ADDR` and `API_METRICS_ADDR` (two with port 0
	// differ). The Kubernetes manifests use `:8081` (port `probes`),
	// compose `:8079`.
	ProbeAddr string `env:"PROBE_ADDR" check:"addr" by:"api"`
	// The worker's listen address: `/healthz`, `/readyz`, `/metrics`.
	MetricsAddr string `env:"METRICS_ADDR" envDefault:":9091" check:"addr" by:"worker"`
	// The listen address of the worker's read-only queue UI (asynqmon);
	// empty: off. See [Queue inspection](observability.md#queue-inspection).
	AdminAddr string `env:"ADMIN_ADDR" check:"addr" by:"worker"`
	// Guards the queue UI of `ADMIN_ADDR`: the UI asks for it as a bearer
	// token or an HTTP Basic password.
	AdminToken Secret `env:"ADMIN_TOKEN" with:"ADMIN_ADDR" minLen:"32" by:"worker"`
	// The base URL at which cardholders' browsers reach the API: challenge
	// links and the return from a provider's challenge page are built on
	// it. Set it to the public HTTPS address behind a load balancer. The
	// API's default has the port it listens on, the one it took when
	// `HTTP_ADDR`'s is 0; the worker, which does not listen there, needs
	// `PUBLIC_URL` set then.
	PublicURL string `env:"PUBLIC_URL" accepts:"an absolute http or https URL without a path" docDefault:"http://127.0.0.1 with the port of HTTP_ADDR" by:"api,worker"`
	// Proxies whose `X-Forwarded-For` is believed; empty trusts nobody, and
	// behind a proxy every client then shares its per-IP rate limits. See
	// [Trusted proxies in Kubernetes](deploy.md#trusted-proxies-in-kubernetes).
	TrustedProxies []netip.Prefix `env:"TRUSTED_PROXIES" by:"api"`
	// A request (line, headers and body) must arrive whole within this time
	// of its first byte; the deadline is not extended per byte, so a client
	// that trickles headers or a body is cut off then.
	HTTPReadTimeout time.Duration `env:"HTTP_READ_TIMEOUT" envDefault:"15s" min:"100ms" by:"api"`
	// The bound on writing one answer to a client that reads slowly.
	HTTPWriteTimeout time.Duration `env:"HTTP_WRITE_TIMEOUT" envDefault:"15s" min:"100ms" by:"api"`
	// A keep-alive connection that sends no new request for this long is
	// closed; keep it above the load balancer's idle timeout (60 s on most).
	HTTPIdleTimeout time.Duration `env:"HTTP_IDLE_TIMEOUT" envDefault:"75s" min:"100ms" by:"api"`
	// Client connections open at once per process, idle keep-alive ones
	// included. A connection beyond it never reaches the HTTP server: as
	// soon as its request begins to arrive (at most 1 s), without the
	// request being read, it gets `503 service_unavailable` in the usual
	// error body with `Retry-After: 1` and `Connection: close`, and is
	// closed; `gatehouse_http_connections_refused_total` counts them, and a
	// warning is logged at most once a minute. Connections under the cap are
	// unaffected. `/healthz` and `/readyz` on this port are refused too
	// while a process is at the cap; set `PROBE_ADDR` to serve them on a
	// port of their own, as the Kubernetes manifests and compose do. The
	// request line and headers must fit 16 KiB (431 otherwise); bodies are
	// limited to 64 KiB (413) and never accepted compressed (415).
	HTTPMaxConns int `env:"HTTP_MAX_CONNS" envDefault:"10000" min:"1" by:"api"`

	// `debug` adds one line per request.
	LogLevel slog.Level `env:"LOG_LEVEL" envDefault:"info" group:"Process" by:"api,worker"`
	// Drain time after SIGTERM: the API stops accepting connections and
	// finishes in-flight requests, the worker stops taking tasks and lets
	// running ones finish (asynq re-queues any still running after it).
	// Give the orchestrator a grace period above it.
	ShutdownTimeout time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"25s" min:"1s" by:"api,worker"`
	// After SIGTERM, keep serving with readiness false for this long before
	// closing the listener, so load balancers stop routing first.
	ShutdownDelay time.Duration `env:"SHUTDOWN_DELAY" envDefault:"0s" by:"api"`

	// Per client IP, `POST /v1/auth/login`.
	RateLimitLogin Limit `env:"RATE_LIMIT_LOGIN" envDefault:"10/5m" group:"Rate limits" by:"api"`
	// Failed logins per account (email) across addresses; over it,
	// `POST /v1/auth/login` for that email answers 429 except from
	// addresses that signed in to the account in the last 30 days (see
	// [docs/design.md](design.md)).
	RateLimitLoginAccount Limit `env:"RATE_LIMIT_LOGIN_ACCOUNT" envDefault:"20/15m" by:"api"`
	// Per API key, `POST /v1/charges`.
	RateLimitCharges Limit `env:"RATE_LIMIT_CHARGES" envDefault:"100/1m" by:"api"`
	// Per merchant, `POST /v1/charges`, over all its keys, as well as
	// per key: keys are not limited in number, so a merchant cannot raise
	// its charge rate by making more of them.
	RateLimitChargesMerchant Limit `env:"RATE_LIMIT_CHARGES_MERCHANT" envDefault:"1000/1m" by:"api"`
	// Per client IP, every other `/v1` route, and every failed
	// authentication on `POST /v1/charges`.
	RateLimitDefault Limit `env:"RATE_LIMIT_DEFAULT" envDefault:"500/1m" by:"api"`
	// Per public key, `POST /v1/tokens`, counting only the requests that
	// passed the per-IP `RATE_LIMIT_DEFAULT`: every shopper of a merchant
	// shares it, and one address can spend at most its own per-IP share of
	// it.
	RateLimitPublicKey Limit `env:"RATE_LIMIT_PUBLIC_KEY" envDefault:"5000/1m" by:"api"`
	// Per webhook endpoint (of its merchant), `POST .../test` and
	// `POST .../recover` each, dry runs included.
	RateLimitEndpointActions Limit `env:"RATE_LIMIT_ENDPOINT_ACTIONS" envDefault:"20/1m" by:"api"`
	// Per client address, provider notifications refused for a bad or
	// missing signature; past it the address is answered 429 before any
	// signature is checked. Notifications with a good signature never
	// count, so a flood of forgeries does not slow the provider's own.
	RateLimitNotificationFailures Limit `env:"RATE_LIMIT_NOTIFICATION_FAILURES" envDefault:"30/1m" by:"api"`

	// The provider of a charge that names none.
	DefaultProvider string `env:"DEFAULT_PROVIDER" envDefault:"sandbox" group:"Providers and charges" oneof:"sandbox,stripe" by:"api"`
	// Enables the `stripe` provider (the API accepts `provider: "stripe"`
	// only when it is set); the worker calls Stripe with it. Required when
	// `DEFAULT_PROVIDER` is `stripe`.
	StripeSecretKey Secret `env:"STRIPE_SECRET_KEY" by:"api,worker"`
	// The signing secret (`whsec_...`) of the webhook endpoint of the
	// server's own Stripe account that sends to the notification URL of a
	// server-account Stripe connector; without it, those notifications are
	// refused 401. A connector with its own credentials takes its
	// `webhook_secret`.
	StripeWebhookSecret Secret `env:"STRIPE_WEBHOOK_SECRET" by:"api"`
	// Where the worker calls Adyen's Checkout API (its version included);
	// point it at a mock in tests. Adyen connectors take their credentials
	// from the connector.
	AdyenAPIBase string `env:"ADYEN_API_BASE" envDefault:"https://checkout-test.adyen.com/v71" by:"worker"`
	// Where the worker calls Adyen's Disputes API (its version included)
	// with a merchant's answer to a dispute: the evidence as a defense
	// document, or the loss accepted. Live accounts use
	// `https://ca-live.adyen.com/ca/services/DisputeService/v30`; point it
	// at a mock in tests.
	AdyenDisputeAPIBase string `env:"ADYEN_DISPUTE_API_BASE" envDefault:"https://ca-test.adyen.com/ca/services/DisputeService/v30" by:"worker"`
	// Where the worker calls Stripe, and where the API reads a Stripe
	// connector's balance transactions to reconcile them; point it at
	// stripe-mock in tests.
	StripeAPIBase string `env:"STRIPE_API_BASE" envDefault:"https://api.stripe.com" by:"api,worker"`
	// The bound on one provider call. The API reads it too, for the deadline
	// of the tasks it enqueues: give both binaries the same value.
	ProviderTimeout time.Duration `env:"PROVIDER_TIMEOUT" envDefault:"15s" min:"10ms" by:"api,worker"`
	// Connectors one charge tries at most: its route is cut to this many
	// when the charge is created. See [docs/routing.md](routing.md).
	RoutingMaxAttempts int `env:"ROUTING_MAX_ATTEMPTS" envDefault:"3" min:"1" max:"10" by:"api"`
	// Attempts of an authorization or a void before the charge fails
	// `provider_unavailable` (a void: the charge stays authorized). Captures
	// and refunds whose outcome is unknown never fail for want of an answer:
	// they keep trying with the backoff for 24 h, then are looked up (see
	// [Unknown provider outcomes](background.md#unknown-provider-outcomes)).
	ProviderMaxAttempts int `env:"PROVIDER_MAX_ATTEMPTS" envDefault:"6" min:"1" max:"25" by:"api,worker"`
	// The first step of the exponential backoff between provider attempts.
	// Each wait is drawn uniformly from the top quarter of its step (75 % to
	// 100 %), so tasks an outage held back do not return at the same
	// instant.
	ProviderRetryBase time.Duration `env:"PROVIDER_RETRY_BASE" envDefault:"2s" min:"1ms" by:"api,worker"`
	// The largest step of the backoff of `PROVIDER_RETRY_BASE`; it stays an
	// upper bound of every wait.
	ProviderRetryMax time.Duration `env:"PROVIDER_RETRY_MAX" envDefault:"5m" min:"1ms" by:"api,worker"`
	// How long after it was requested a capture or refund whose outcome is
	// unknown is sent again under its idempotency key; after it the provider
	// is only asked to look it up, never sent it again. Stripe keeps
	// idempotency keys 24 h: never set this above the provider's window.
	ProviderIdempotencyWindow time.Duration `env:"PROVIDER_IDEMPOTENCY_WINDOW" envDefault:"24h" min:"1s" by:"worker"`
	// The age at which an authorization, capture or refund whose outcome is
	// still unknown is counted by `gatehouse_provider_outcomes_unknown`
	// (alert `GatehouseProviderOutcomeUnknown`) and logged at error level
	// on each attempt.
	ProviderOutcomeUnknownAfter time.Duration `env:"PROVIDER_OUTCOME_UNKNOWN_AFTER" envDefault:"24h" min:"1s" by:"worker"`
	// How long a capture, void or refund that a provider settling by
	// notification (Adyen) received may wait for its notification; past
	// it, it is counted by `gatehouse_provider_confirmations_overdue` and
	// the alert GatehouseProviderConfirmationOverdue fires.
	ProviderConfirmationTimeout time.Duration `env:"PROVIDER_CONFIRMATION_TIMEOUT" envDefault:"24h" min:"1s" by:"worker"`
	// Provider outages in a row that open a provider's circuit breaker for
	// 30 s.
	ProviderBreakerFailures int `env:"PROVIDER_BREAKER_FAILURES" envDefault:"20" min:"1" by:"worker"`
	// Provider calls (authorizations, captures, voids, refunds,
	// authentications) one worker process runs at once for one merchant,
	// of its 50 provider slots, so one merchant's slow connector or flood
	// of charges cannot delay another's. The default is a quarter of the
	// slots. See [Provider slots](background.md#provider-slots).
	ProviderMerchantSlots int `env:"PROVIDER_MERCHANT_SLOTS" envDefault:"12" min:"1" max:"50" by:"worker"`
	// How long a charge in `requires_action` waits for the cardholder
	// (3-D Secure) before it fails `authentication_expired`.
	AuthenticationTimeout time.Duration `env:"AUTHENTICATION_TIMEOUT" envDefault:"1h" min:"1s" by:"worker"`
	// The age at which an unfinished outbox task is enqueued again.
	OutboxSweepAfter time.Duration `env:"OUTBOX_SWEEP_AFTER" envDefault:"30s" min:"1s" by:"worker"`
	// The age at which a charge or refund waiting for the worker gets its
	// task re-created.
	ReconcileAfter time.Duration `env:"RECONCILE_AFTER" envDefault:"2m" min:"1s" by:"worker"`
	// Artificial latency of each sandbox provider call (load tests).
	SandboxLatency time.Duration `env:"SANDBOX_LATENCY" envDefault:"0s" by:"worker"`
	// How long a sandbox capture's money waits before it is available for
	// payout (its balance transaction's available_on). The API's sandbox
	// settlement report reads it too: give both binaries the same value.
	SandboxSettlementDelay time.Duration `env:"SANDBOX_SETTLEMENT_DELAY" envDefault:"48h" by:"api,worker"`
	// How often a sandbox connector on the daily payout schedule pays out
	// its available balance: 24 h is daily, at midnight UTC (shorter, in
	// tests, to see schedules run).
	SandboxPayoutInterval time.Duration `env:"SANDBOX_PAYOUT_INTERVAL" envDefault:"24h" min:"1s" by:"worker"`
	// How long a sandbox payout is in transit before it is paid (or fails,
	// when its connector rehearses a payout failure).
	SandboxPayoutDelay time.Duration `env:"SANDBOX_PAYOUT_DELAY" envDefault:"24h" by:"api,worker"`
	// How long after test evidence (winning_evidence, losing_evidence) is
	// submitted the sandbox decides a dispute.
	SandboxDisputeDecisionDelay time.Duration `env:"SANDBOX_DISPUTE_DECISION_DELAY" envDefault:"30s" min:"0s" by:"worker"`

	// The delay before each delivery attempt, counted from the previous
	// attempt's end; each is made up to 10 % longer at random (never
	// shorter), so deliveries that failed together do not return together.
	WebhookRetrySchedule []time.Duration `env:"WEBHOOK_RETRY_SCHEDULE" envDefault:"0s,5m,30m,2h,24h" group:"Webhooks" by:"worker"`
	// The bound on one delivery attempt. The API reads it too, for the
	// deadline of the tasks it enqueues: give both binaries the same value.
	WebhookTimeout time.Duration `env:"WEBHOOK_TIMEOUT" envDefault:"5s" min:"1ms" by:"api,worker"`
	// Delivery attempts one worker process runs at once to one merchant's
	// endpoints, of its 100 delivery slots, so one merchant's dead endpoints
	// cannot delay the others'. See [Delivery slots](background.md#delivery-slots).
	WebhookMerchantSlots int `env:"WEBHOOK_MERCHANT_SLOTS" envDefault:"25" min:"1" max:"100" by:"worker"`
	// The asynq queues deliveries are spread over: `webhooks-0` ...
	// `webhooks-N-1`, an endpoint always on the same one (FNV-1a of its id,
	// mod N). The API and the workers must agree; to change it see
	// [Queues](background.md#queues).
	WebhookQueues int `env:"WEBHOOK_QUEUES" envDefault:"8" min:"1" max:"64" by:"api,worker"`
	// An endpoint whose attempts have done nothing but fail this long is
	// disabled at its next failure (`failing`); `0s` never disables for
	// failures (a `410 Gone` still does).
	WebhookDisableAfter time.Duration `env:"WEBHOOK_DISABLE_AFTER" envDefault:"120h" by:"worker"`
	// An endpoint whose attempts have done nothing but fail this long sends
	// its merchant's other endpoints `webhook_endpoint.failing`, once per
	// run of failures: at its next failed attempt, or by the worker's sweep
	// (`webhooks:health`) within a minute; `0s` never sends it.
	WebhookFailingAfter time.Duration `env:"WEBHOOK_FAILING_AFTER" envDefault:"1h" by:"worker"`
	// Development and tests only: lets endpoints and deliveries reach
	// loopback and private addresses.
	WebhookAllowPrivateNetworks bool `env:"WEBHOOK_ALLOW_PRIVATE_NETWORKS" envDefault:"false" by:"api,worker"`
	// How long webhook deliveries and their attempts are kept: at least the
	// sum of `WEBHOOK_RETRY_SCHEDULE`, so no delivery is dropped while it is
	// retried; dropped by partition like events (see
	// [Retention](background.md#retention)).
	WebhookLogRetention time.Duration `env:"WEBHOOK_LOG_RETENTION" envDefault:"720h" min:"1m" by:"api,worker,migrate"`

	// How long events are kept: the API serves none older, and the worker
	// drops them by partition (see [Retention](background.md#retention));
	// provider notifications the worker has applied are deleted after it too.
	EventRetention time.Duration `env:"EVENT_RETENTION" envDefault:"720h" min:"1m" group:"Events" by:"api,worker,migrate"`
	// Open `GET /v1/events/stream` connections one API replica serves;
	// beyond, `503` (clients reconnect, to another replica behind the load
	// balancer).
	EventStreamMax int `env:"EVENT_STREAM_MAX" envDefault:"1000" min:"1" by:"api"`
	// Open event streams of one merchant, all its keys together, on one
	// replica; beyond, `429` with `Retry-After`, so that one merchant cannot
	// take every place of a replica.
	EventStreamMaxPerMerchant int `env:"EVENT_STREAM_MAX_PER_MERCHANT" envDefault:"20" min:"1" by:"api"`
	// Open event streams of one API key on one replica; beyond, `429` with
	// `Retry-After`.
	EventStreamMaxPerKey int `env:"EVENT_STREAM_MAX_PER_KEY" envDefault:"5" min:"1" by:"api"`
	// How often an idle event stream sends a comment; keep it under the load
	// balancer's idle timeout.
	EventStreamHeartbeat time.Duration `env:"EVENT_STREAM_HEARTBEAT" envDefault:"15s" min:"100ms" by:"api"`
}

// DefaultMaxConcurrentHashes is half of GOMAXPROCS, at least 1: GOMAXPROCS
// follows the container's CPU limit, so a login flood leaves the other half
// to payments.
func DefaultMaxConcurrentHashes() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// Needs says which settings a command cannot run without.
type Needs struct {
	Database, Redis, JWT, Encryption bool
}

// Providers names the payment providers a charge may use (DEFAULT_PROVIDER's
// values).
var Providers = []string{"sandbox", "stripe"}

// Providers returns the names of the providers this deployment can use: the
// sandbox always, Stripe when a secret key is configured.
func (c Config) Providers() []string {
	if c.StripeSecretKey != "" {
		return []string{"sandbox", "stripe"}
	}
	return []string{"sandbox"}
}

// DefaultWebhookQueues is WEBHOOK_QUEUES's default: enough queues to spread
// deliveries over the primaries of a Redis Cluster of a few, few enough that
// an idle worker's polls of them stay cheap (asynq polls each queue of a
// server in turn).
const DefaultWebhookQueues = 8
