// Package config loads Gatehouse's settings from the environment. Load reads
// every variable, collects every problem at once and reports them in one line,
// so an operator fixes a bad deployment in one round. Secrets are held in the
// Secret type, which never prints its value.
package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"time"
)

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

// Config holds every setting of both binaries.
type Config struct {
	DatabaseURL Secret // may carry a password
	// DatabaseReadURL, when set, is a hot standby of DatabaseURL that
	// serves the API's list reads while it is at most DatabaseReadMaxLag
	// behind the primary (store.Standby); empty: every read on the primary.
	DatabaseReadURL    Secret
	DatabaseReadMaxLag time.Duration
	// DatabasePoolMode is "session" (DATABASE_URL reaches PostgreSQL, or a
	// pooler that gives each client a session) or "transaction" (PgBouncer
	// in transaction mode: see store.TransactionPooling).
	DatabasePoolMode string
	RedisURL         Secret // may carry a password
	// RedisMode says how RedisURL is read: "single" (one server), "sentinel"
	// (the sentinels' addresses and master_name) or "cluster" (seed nodes).
	RedisMode     string
	JWTSecret     Secret
	EncryptionKey []byte // 32 bytes, from 64 hex characters

	HTTPAddr    string
	MetricsAddr string
	// APIMetricsAddr, when set, moves the api's /metrics off HTTP_ADDR to a
	// listener of its own, so the public port never serves it. Empty keeps
	// /metrics on HTTP_ADDR. A setting apart from METRICS_ADDR, which the
	// worker reads, because local runs give both binaries one environment.
	APIMetricsAddr string
	// ProbeAddr, when set, serves the api's /healthz and /readyz on a
	// listener of its own as well as on HTTP_ADDR: it is not counted against
	// HTTP_MAX_CONNS, so a kubelet's probe answers while the public port is
	// full. The worker serves its probes on METRICS_ADDR.
	ProbeAddr string
	// DatabaseStatementTimeout bounds every statement from the client's
	// side (sending it, the server's work, reading the rows), and pings of
	// pooled connections; DatabaseConnectTimeout bounds opening a
	// connection, TLS and authentication included. Both hold when the
	// network drops packets without a reset, where a server-side
	// statement_timeout cannot help.
	DatabaseStatementTimeout time.Duration
	DatabaseConnectTimeout   time.Duration
	// AdminAddr is the worker's admin listener (the read-only queue UI);
	// empty turns it off. AdminToken guards it.
	AdminAddr       string
	AdminToken      Secret
	TrustedProxies  []netip.Prefix
	LogLevel        slog.Level
	ShutdownTimeout time.Duration
	// ShutdownDelay keeps serving, with readiness false, for this long after
	// SIGTERM so load balancers stop routing before the listener closes.
	ShutdownDelay time.Duration
	// HTTPReadTimeout bounds the reading of one request, headers and body,
	// from its first byte, so a slow sender holds a connection that long at
	// most; HTTPWriteTimeout bounds writing the answer; HTTPIdleTimeout closes
	// a keep-alive connection that sends nothing; HTTPMaxConns caps the
	// connections served at once (more are refused with 503).
	HTTPReadTimeout  time.Duration
	HTTPWriteTimeout time.Duration
	HTTPIdleTimeout  time.Duration
	HTTPMaxConns     int

	WebhookRetrySchedule []time.Duration
	WebhookTimeout       time.Duration
	// EventRetention is how long events are kept, WebhookLogRetention how
	// long webhook deliveries and their attempts are: the worker drops
	// them by partition once past it (docs/operations.md).
	EventRetention      time.Duration
	WebhookLogRetention time.Duration
	// EventStreamMax bounds the open event streams of one API replica,
	// EventStreamMaxPerMerchant those of one merchant on it and
	// EventStreamMaxPerKey those of one API key on it.
	EventStreamMax            int
	EventStreamMaxPerMerchant int
	EventStreamMaxPerKey      int
	// EventStreamHeartbeat is how often an idle event stream sends a comment.
	EventStreamHeartbeat time.Duration
	// WebhookDisableAfter is how long an endpoint may do nothing but fail
	// before it is disabled (0: never).
	WebhookDisableAfter         time.Duration
	WebhookAllowPrivateNetworks bool
	// WebhookMerchantSlots is how many attempts to one merchant's
	// endpoints a worker process runs at once (of its 100 delivery slots).
	WebhookMerchantSlots int
	// WebhookQueues is how many asynq queues deliveries are spread over
	// (webhooks-0 ... webhooks-N-1, an endpoint always on the same one);
	// the API and the workers must agree on it.
	WebhookQueues int

	DefaultProvider string
	StripeSecretKey Secret
	StripeAPIBase   string

	// ProviderTimeout bounds one provider call; ProviderMaxAttempts and
	// ProviderRetryBase shape the retries of a provider outage (exponential
	// from the base, capped at ProviderRetryMax) before a charge fails.
	ProviderTimeout     time.Duration
	ProviderMaxAttempts int
	// RoutingMaxAttempts is how many connectors one charge tries at most.
	RoutingMaxAttempts int
	ProviderRetryBase  time.Duration
	ProviderRetryMax   time.Duration
	// ProviderIdempotencyWindow is how long a capture or refund whose
	// outcome is unknown is sent again under its idempotency key; after it
	// the provider is only asked to look the object up (Stripe keeps keys
	// 24 h). ProviderOutcomeUnknownAfter is how long an outcome (of an
	// authorization the provider has not finished, a capture, a refund) may
	// stay unknown before it is surfaced (error log,
	// gatehouse_provider_outcomes_unknown).
	ProviderIdempotencyWindow   time.Duration
	ProviderOutcomeUnknownAfter time.Duration
	// ProviderBreakerFailures is how many provider outages in a row open a
	// provider's circuit breaker (for 30 s).
	ProviderBreakerFailures int
	// AuthenticationTimeout is how long a charge that requires action waits
	// for the cardholder before it fails authentication_expired.
	AuthenticationTimeout time.Duration
	// PublicURL is the base URL at which cardholders' browsers reach the API
	// (challenge pages and the return from a provider's challenge page).
	PublicURL string
	// SandboxLatency is an artificial delay of every sandbox provider call.
	SandboxLatency time.Duration
	// OutboxSweepAfter is the age at which an unfinished outbox task is
	// enqueued again; ReconcileAfter the age at which a charge or refund
	// waiting for the worker gets its task re-created.
	OutboxSweepAfter time.Duration
	ReconcileAfter   time.Duration

	RateLimitCharges Limit
	RateLimitLogin   Limit
	RateLimitDefault Limit
	// RateLimitPublicKey bounds POST /v1/tokens per public key, counting
	// only requests that passed the per-address limit, so one address can
	// spend at most its own share of what every shopper of the merchant
	// shares.
	RateLimitPublicKey Limit
	// RateLimitEndpointActions bounds, per webhook endpoint, its test
	// deliveries and its recovers (each on its own count).
	RateLimitEndpointActions Limit
	// RateLimitLoginAccount is the budget of failed logins per account
	// (email), across addresses; over it, only addresses that signed in to
	// the account before may try (see docs/design.md).
	RateLimitLoginAccount Limit

	// MaxConcurrentHashes caps concurrent password hashes (argon2id uses 19 MiB each).
	MaxConcurrentHashes int
	// JWTIssuer and JWTAudience are stamped into and required of every session token.
	JWTIssuer   string
	JWTAudience string
}

// DefaultMaxConcurrentHashes is half of GOMAXPROCS, at least 1.
func DefaultMaxConcurrentHashes() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// Needs says which settings a command cannot run without.
type Needs struct {
	Database, Redis, JWT, Encryption bool
}

// Providers names the payment providers a charge may use.
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

// Load reads the configuration through getenv and checks it against needs.
// The error, if any, names every problem in one line and never a secret value.
func Load(getenv func(string) string, needs Needs) (Config, error) {
	var problems []string
	bad := func(name, format string, args ...any) {
		problems = append(problems, name+" "+fmt.Sprintf(format, args...))
	}
	get := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}

	c := Config{
		DatabaseURL:      Secret(get("DATABASE_URL", "")),
		DatabaseReadURL:  Secret(get("DATABASE_READ_URL", "")),
		DatabasePoolMode: get("DATABASE_POOL_MODE", "session"),
		RedisURL:         Secret(get("REDIS_URL", "")),
		RedisMode:        get("REDIS_MODE", "single"),
		AdminAddr:        get("ADMIN_ADDR", ""),
		AdminToken:       Secret(get("ADMIN_TOKEN", "")),
		JWTSecret:        Secret(getenv("JWT_SECRET")),
		HTTPAddr:         get("HTTP_ADDR", ":8080"),
		MetricsAddr:      get("METRICS_ADDR", ":9091"),
		APIMetricsAddr:   get("API_METRICS_ADDR", ""),
		ProbeAddr:        get("PROBE_ADDR", ""),
		DefaultProvider:  get("DEFAULT_PROVIDER", "sandbox"),
		StripeSecretKey:  Secret(get("STRIPE_SECRET_KEY", "")),
		StripeAPIBase:    get("STRIPE_API_BASE", "https://api.stripe.com"),
		JWTIssuer:        get("JWT_ISSUER", "gatehouse"),
		JWTAudience:      get("JWT_AUDIENCE", "gatehouse-dashboard"),
	}

	if c.DatabaseURL == "" {
		if needs.Database {
			bad("DATABASE_URL", "is required (e.g. postgres://user@127.0.0.1:5432/gatehouse)")
		}
	} else if u, err := url.Parse(c.DatabaseURL.Reveal()); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		bad("DATABASE_URL", "must be a postgres:// URL")
	}
	if c.DatabaseReadURL != "" {
		if u, err := url.Parse(c.DatabaseReadURL.Reveal()); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			bad("DATABASE_READ_URL", "must be a postgres:// URL")
		}
	}
	if c.DatabasePoolMode != "session" && c.DatabasePoolMode != "transaction" {
		bad("DATABASE_POOL_MODE", "must be session or transaction, got %q", c.DatabasePoolMode)
	}
	if c.RedisURL == "" {
		if needs.Redis {
			bad("REDIS_URL", "is required (e.g. redis://127.0.0.1:6379/0)")
		}
	} else if u, err := url.Parse(c.RedisURL.Reveal()); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		bad("REDIS_URL", "must be a redis:// or rediss:// URL")
	}
	if c.RedisMode != "single" && c.RedisMode != "sentinel" && c.RedisMode != "cluster" {
		bad("REDIS_MODE", "must be single, sentinel or cluster, got %q", c.RedisMode)
	}
	if c.AdminAddr != "" {
		if _, port, ok := strings.Cut(c.AdminAddr, ":"); !ok || port == "" {
			bad("ADMIN_ADDR", "must be host:port or :port, got %q", c.AdminAddr)
		}
		if len(c.AdminToken) < 32 {
			bad("ADMIN_TOKEN", "must be at least 32 bytes when ADMIN_ADDR is set")
		}
	}
	if len(c.JWTSecret) == 0 {
		if needs.JWT {
			bad("JWT_SECRET", "is required (at least 32 bytes)")
		}
	} else if len(c.JWTSecret) < 32 {
		bad("JWT_SECRET", "must be at least 32 bytes, got %d", len(c.JWTSecret))
	}
	if v := getenv("ENCRYPTION_KEY"); v == "" {
		if needs.Encryption {
			bad("ENCRYPTION_KEY", "is required (32 bytes as 64 hex characters)")
		}
	} else if k, err := hex.DecodeString(strings.TrimSpace(v)); err != nil || len(k) != 32 {
		bad("ENCRYPTION_KEY", "must be 32 bytes as 64 hex characters")
	} else {
		c.EncryptionKey = k
	}

	for _, addr := range []struct{ name, v string }{{"HTTP_ADDR", c.HTTPAddr}, {"METRICS_ADDR", c.MetricsAddr}} {
		if _, port, ok := strings.Cut(addr.v, ":"); !ok || port == "" {
			bad(addr.name, "must be host:port or :port, got %q", addr.v)
		}
	}
	if c.APIMetricsAddr != "" {
		if _, port, ok := strings.Cut(c.APIMetricsAddr, ":"); !ok || port == "" {
			bad("API_METRICS_ADDR", "must be host:port or :port, got %q", c.APIMetricsAddr)
		} else if c.APIMetricsAddr == c.HTTPAddr {
			bad("API_METRICS_ADDR", "must differ from HTTP_ADDR (leave it empty to serve /metrics on HTTP_ADDR)")
		}
	}
	if c.ProbeAddr != "" {
		if _, port, ok := strings.Cut(c.ProbeAddr, ":"); !ok || port == "" {
			bad("PROBE_ADDR", "must be host:port or :port, got %q", c.ProbeAddr)
		} else if c.ProbeAddr == c.HTTPAddr || c.ProbeAddr == c.APIMetricsAddr {
			bad("PROBE_ADDR", "must differ from HTTP_ADDR and API_METRICS_ADDR (leave it empty to serve the probes on HTTP_ADDR only)")
		}
	}

	if v := get("TRUSTED_PROXIES", ""); v != "" {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			if p == "" {
				continue
			}
			if prefix, err := netip.ParsePrefix(p); err == nil {
				c.TrustedProxies = append(c.TrustedProxies, prefix.Masked())
			} else if addr, err := netip.ParseAddr(p); err == nil {
				c.TrustedProxies = append(c.TrustedProxies, netip.PrefixFrom(addr.Unmap(), addr.Unmap().BitLen()))
			} else {
				bad("TRUSTED_PROXIES", "has %q, which is neither an IP address nor a CIDR", p)
			}
		}
	}

	if err := c.LogLevel.UnmarshalText([]byte(get("LOG_LEVEL", "info"))); err != nil {
		bad("LOG_LEVEL", "must be debug, info, warn or error")
	}

	duration := func(name, def string, min time.Duration) time.Duration {
		d, err := time.ParseDuration(get(name, def))
		if err != nil || d < min {
			bad(name, "must be a duration of at least %s such as %s", min, def)
		}
		return d
	}
	c.ShutdownTimeout = duration("SHUTDOWN_TIMEOUT", "25s", time.Second)
	c.DatabaseStatementTimeout = duration("DATABASE_STATEMENT_TIMEOUT", "5s", 100*time.Millisecond)
	c.DatabaseConnectTimeout = duration("DATABASE_CONNECT_TIMEOUT", "5s", 100*time.Millisecond)
	c.DatabaseReadMaxLag = duration("DATABASE_READ_MAX_LAG", "5s", time.Second)
	c.ShutdownDelay = duration("SHUTDOWN_DELAY", "0s", 0)
	c.HTTPReadTimeout = duration("HTTP_READ_TIMEOUT", "15s", 100*time.Millisecond)
	c.HTTPWriteTimeout = duration("HTTP_WRITE_TIMEOUT", "15s", 100*time.Millisecond)
	c.HTTPIdleTimeout = duration("HTTP_IDLE_TIMEOUT", "75s", 100*time.Millisecond)
	if n, err := strconv.Atoi(get("HTTP_MAX_CONNS", "10000")); err != nil || n < 1 {
		bad("HTTP_MAX_CONNS", "must be a positive integer")
	} else {
		c.HTTPMaxConns = n
	}
	c.ProviderTimeout = duration("PROVIDER_TIMEOUT", "15s", 10*time.Millisecond)
	c.ProviderRetryBase = duration("PROVIDER_RETRY_BASE", "2s", time.Millisecond)
	c.ProviderRetryMax = duration("PROVIDER_RETRY_MAX", "5m", time.Millisecond)
	c.ProviderIdempotencyWindow = duration("PROVIDER_IDEMPOTENCY_WINDOW", "24h", time.Second)
	c.ProviderOutcomeUnknownAfter = duration("PROVIDER_OUTCOME_UNKNOWN_AFTER", "24h", time.Second)
	c.SandboxLatency = duration("SANDBOX_LATENCY", "0s", 0)
	c.AuthenticationTimeout = duration("AUTHENTICATION_TIMEOUT", "1h", time.Second)
	c.PublicURL = strings.TrimRight(get("PUBLIC_URL", defaultPublicURL(c.HTTPAddr)), "/")
	if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
		bad("PUBLIC_URL", "must be an absolute http or https URL without a path (e.g. https://pay.example.com)")
	}
	c.OutboxSweepAfter = duration("OUTBOX_SWEEP_AFTER", "30s", time.Second)
	c.ReconcileAfter = duration("RECONCILE_AFTER", "2m", time.Second)
	if n, err := strconv.Atoi(get("PROVIDER_BREAKER_FAILURES", "20")); err != nil || n < 1 {
		bad("PROVIDER_BREAKER_FAILURES", "must be a positive integer")
	} else {
		c.ProviderBreakerFailures = n
	}
	if n, err := strconv.Atoi(get("ROUTING_MAX_ATTEMPTS", "3")); err != nil || n < 1 || n > 10 {
		bad("ROUTING_MAX_ATTEMPTS", "must be an integer from 1 to 10")
	} else {
		c.RoutingMaxAttempts = n
	}
	if n, err := strconv.Atoi(get("PROVIDER_MAX_ATTEMPTS", "6")); err != nil || n < 1 || n > 25 {
		bad("PROVIDER_MAX_ATTEMPTS", "must be an integer from 1 to 25")
	} else {
		c.ProviderMaxAttempts = n
	}
	c.WebhookTimeout = duration("WEBHOOK_TIMEOUT", "5s", time.Millisecond)
	c.WebhookDisableAfter = duration("WEBHOOK_DISABLE_AFTER", "120h", 0)
	if n, err := strconv.Atoi(get("WEBHOOK_MERCHANT_SLOTS", "25")); err != nil || n < 1 || n > 100 {
		bad("WEBHOOK_MERCHANT_SLOTS", "must be an integer from 1 to 100 (the worker's delivery slots)")
	} else {
		c.WebhookMerchantSlots = n
	}
	if n, err := strconv.Atoi(get("WEBHOOK_QUEUES", strconv.Itoa(DefaultWebhookQueues))); err != nil || n < 1 || n > 64 {
		bad("WEBHOOK_QUEUES", "must be an integer from 1 to 64")
	} else {
		c.WebhookQueues = n
	}
	c.EventStreamHeartbeat = duration("EVENT_STREAM_HEARTBEAT", "15s", 100*time.Millisecond)
	for _, v := range []struct {
		name, def string
		dst       *int
	}{{"EVENT_STREAM_MAX", "1000", &c.EventStreamMax}, {"EVENT_STREAM_MAX_PER_MERCHANT", "20", &c.EventStreamMaxPerMerchant},
		{"EVENT_STREAM_MAX_PER_KEY", "5", &c.EventStreamMaxPerKey}} {
		if n, err := strconv.Atoi(get(v.name, v.def)); err != nil || n < 1 {
			bad(v.name, "must be a positive integer")
		} else {
			*v.dst = n
		}
	}

	for _, s := range strings.Split(get("WEBHOOK_RETRY_SCHEDULE", "0s,5m,30m,2h,24h"), ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d < 0 {
			bad("WEBHOOK_RETRY_SCHEDULE", "must be a comma-separated list of durations such as 0s,5m,30m,2h,24h")
			break
		}
		c.WebhookRetrySchedule = append(c.WebhookRetrySchedule, d)
	}

	c.EventRetention = duration("EVENT_RETENTION", "720h", time.Minute)
	c.WebhookLogRetention = duration("WEBHOOK_LOG_RETENTION", "720h", time.Minute)
	// A delivery is kept at least as long as its retries can go on: one
	// dropped while pending would leave its task behind.
	var retrying time.Duration
	for _, d := range c.WebhookRetrySchedule {
		retrying += d
	}
	if c.WebhookLogRetention > 0 && c.WebhookLogRetention < retrying {
		bad("WEBHOOK_LOG_RETENTION", "must be at least the sum of WEBHOOK_RETRY_SCHEDULE (%s)", retrying)
	}

	if v := get("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "false"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			bad("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "must be true or false")
		}
		c.WebhookAllowPrivateNetworks = b
	}

	known := false
	for _, p := range Providers {
		known = known || p == c.DefaultProvider
	}
	if !known {
		bad("DEFAULT_PROVIDER", "must be one of %s", strings.Join(Providers, ", "))
	}
	if c.DefaultProvider == "stripe" && c.StripeSecretKey == "" {
		bad("STRIPE_SECRET_KEY", "is required when DEFAULT_PROVIDER is stripe")
	}

	limit := func(name, def string) Limit {
		l, err := ParseLimit(get(name, def))
		if err != nil {
			bad(name, "%v", err)
		}
		return l
	}
	c.RateLimitCharges = limit("RATE_LIMIT_CHARGES", "100/1m")
	c.RateLimitLogin = limit("RATE_LIMIT_LOGIN", "10/5m")
	c.RateLimitDefault = limit("RATE_LIMIT_DEFAULT", "500/1m")
	c.RateLimitPublicKey = limit("RATE_LIMIT_PUBLIC_KEY", "5000/1m")
	c.RateLimitEndpointActions = limit("RATE_LIMIT_ENDPOINT_ACTIONS", "20/1m")
	c.RateLimitLoginAccount = limit("RATE_LIMIT_LOGIN_ACCOUNT", "20/15m")

	// By default hashing may take half the CPUs the process has (GOMAXPROCS
	// follows the container's CPU limit), so a login flood leaves the other
	// half to payments.
	n, err := strconv.Atoi(get("MAX_CONCURRENT_HASHES", strconv.Itoa(DefaultMaxConcurrentHashes())))
	if err != nil || n < 1 {
		bad("MAX_CONCURRENT_HASHES", "must be a positive integer")
	}
	c.MaxConcurrentHashes = n

	if len(problems) > 0 {
		return Config{}, errors.New("invalid configuration: " + strings.Join(problems, "; "))
	}
	return c, nil
}

// defaultPublicURL is the API's own address on loopback: right for a local
// stack, and replaced by PUBLIC_URL behind a load balancer.
func defaultPublicURL(httpAddr string) string {
	host, port, err := net.SplitHostPort(httpAddr)
	if err != nil || port == "" {
		return "http://127.0.0.1:8080"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
