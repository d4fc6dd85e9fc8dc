package config

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

var valid = map[string]string{
	"DATABASE_URL":   "postgres://u:hunter2@db:5432/gatehouse",
	"REDIS_URL":      "redis://:hunter3@redis:6379/0",
	"JWT_SECRET":     strings.Repeat("j", 32),
	"ENCRYPTION_KEY": strings.Repeat("0f", 32),
}

func TestLoadDefaults(t *testing.T) {
	c, err := Load(envOf(valid), Needs{Database: true, Redis: true, JWT: true, Encryption: true})
	if err != nil {
		t.Fatal(err)
	}
	got := []any{c.HTTPAddr, c.MetricsAddr, c.APIMetricsAddr, c.DefaultProvider, c.RateLimitCharges, c.RateLimitLogin, c.RateLimitDefault, c.RateLimitLoginAccount, c.WebhookTimeout, c.WebhookRetrySchedule, c.WebhookAllowPrivateNetworks, len(c.EncryptionKey)}
	want := []any{":8080", ":9091", "", "sandbox", Limit{100, time.Minute}, Limit{10, 5 * time.Minute}, Limit{500, time.Minute}, Limit{20, 15 * time.Minute}, 5 * time.Second,
		[]time.Duration{0, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 24 * time.Hour}, false, 32}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("defaults (-want +got):\n%s", diff)
	}
	// No standby: every read on the primary; a session per connection.
	if c.DatabaseReadURL != "" || c.DatabaseReadMaxLag != 5*time.Second || c.DatabasePoolMode != "session" {
		t.Fatalf("database defaults: read URL %q, max lag %s, pool mode %q", c.DatabaseReadURL.Reveal(), c.DatabaseReadMaxLag, c.DatabasePoolMode)
	}
}

func TestLoadReportsEveryProblemOnceWithoutSecrets(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL":           "mysql://root:topsecretpw@x/y",
		"JWT_SECRET":             "short-secret-value",
		"ENCRYPTION_KEY":         "nothex",
		"RATE_LIMIT_CHARGES":     "lots",
		"WEBHOOK_RETRY_SCHEDULE": "0s,soon",
		"LOG_LEVEL":              "loud",
		"TRUSTED_PROXIES":        "10.0.0.0/8,not-an-ip",
		"DEFAULT_PROVIDER":       "paypal",
		"REDIS_MODE":             "ring",
		"ADMIN_ADDR":             ":9092",
		"ADMIN_TOKEN":            "short-admin-token",
		"DATABASE_READ_URL":      "mysql://root:readsecretpw@standby/y",
		"DATABASE_READ_MAX_LAG":  "10ms",
		"DATABASE_POOL_MODE":     "statement",
	}
	_, err := Load(envOf(env), Needs{Database: true, Redis: true, JWT: true, Encryption: true})
	if err == nil {
		t.Fatal("want an error")
	}
	msg := err.Error()
	for _, name := range []string{"DATABASE_URL", "REDIS_URL", "JWT_SECRET", "ENCRYPTION_KEY", "RATE_LIMIT_CHARGES", "WEBHOOK_RETRY_SCHEDULE", "LOG_LEVEL", "TRUSTED_PROXIES", "DEFAULT_PROVIDER", "REDIS_MODE", "ADMIN_TOKEN",
		"DATABASE_READ_URL", "DATABASE_READ_MAX_LAG", "DATABASE_POOL_MODE"} {
		if !strings.Contains(msg, name) {
			t.Errorf("error does not name %s: %s", name, msg)
		}
	}
	for _, secret := range []string{"topsecretpw", "readsecretpw", "short-secret-value", "short-admin-token"} {
		if strings.Contains(msg, secret) {
			t.Errorf("error leaks %q: %s", secret, msg)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line: %q", msg)
	}
}

// TestAPIMetricsAddr: the api's own metrics listener is off by default; a
// bad address, or HTTP_ADDR itself, stops the program at start.
func TestAPIMetricsAddr(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want string // the address, or a fragment of the error
		ok   bool
	}{
		{map[string]string{}, "", true},
		{map[string]string{"API_METRICS_ADDR": ":9090"}, ":9090", true},
		{map[string]string{"API_METRICS_ADDR": "127.0.0.1:9090", "HTTP_ADDR": "127.0.0.1:8080"}, "127.0.0.1:9090", true},
		{map[string]string{"API_METRICS_ADDR": "9090"}, `API_METRICS_ADDR must be host:port or :port, got "9090"`, false},
		{map[string]string{"API_METRICS_ADDR": "localhost:"}, "API_METRICS_ADDR must be host:port", false},
		{map[string]string{"API_METRICS_ADDR": ":8080"}, "API_METRICS_ADDR must differ from HTTP_ADDR", false},
		// Port 0: each listener takes a free port of its own.
		{map[string]string{"API_METRICS_ADDR": "127.0.0.1:0", "HTTP_ADDR": "127.0.0.1:0"}, "127.0.0.1:0", true},
	}
	for _, c := range cases {
		cfg, err := Load(envOf(c.env), Needs{})
		switch {
		case c.ok && (err != nil || cfg.APIMetricsAddr != c.want):
			t.Errorf("%v: got %q, %v; want %q", c.env, cfg.APIMetricsAddr, err, c.want)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: got error %v, want one containing %q", c.env, err, c.want)
		}
	}
}

func TestNeeds(t *testing.T) {
	if _, err := Load(envOf(map[string]string{"DATABASE_URL": valid["DATABASE_URL"]}), Needs{Database: true}); err != nil {
		t.Fatalf("migrate needs only DATABASE_URL: %v", err)
	}
	if _, err := Load(envOf(map[string]string{}), Needs{Database: true}); err == nil || !strings.Contains(err.Error(), "DATABASE_URL is required") {
		t.Fatalf("got %v", err)
	}
}

func TestParseLimit(t *testing.T) {
	cases := []struct {
		in   string
		want Limit
		ok   bool
	}{
		{"100/1m", Limit{100, time.Minute}, true},
		{"10/5m", Limit{10, 5 * time.Minute}, true},
		{" 7/30s ", Limit{7, 30 * time.Second}, true},
		{"0/1m", Limit{}, false},
		{"-1/1m", Limit{}, false},
		{"5/500ms", Limit{}, false},
		{"5", Limit{}, false},
		{"x/1m", Limit{}, false},
	}
	for _, c := range cases {
		got, err := ParseLimit(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseLimit(%q) = %v, %v; want %v ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestTrustedProxies(t *testing.T) {
	env := map[string]string{"TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.7 ,::1"}
	c, err := Load(envOf(env), Needs{})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"), netip.MustParsePrefix("::1/128")}
	if diff := cmp.Diff(fmt.Sprint(want), fmt.Sprint(c.TrustedProxies)); diff != "" {
		t.Fatal(diff)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	s := Secret("sk_test_supersecret")
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %s %#v", s, s, s), s.LogValue().String()} {
		if strings.Contains(out, "supersecret") {
			t.Fatalf("secret printed: %s", out)
		}
	}
	if s.Reveal() != "sk_test_supersecret" {
		t.Fatal("Reveal lost the value")
	}
}

func TestProbeAddrAndDatabaseTimeouts(t *testing.T) {
	cfg, err := Load(envOf(map[string]string{}), Needs{})
	if err != nil || cfg.ProbeAddr != "" || cfg.DatabaseStatementTimeout != 5*time.Second || cfg.DatabaseConnectTimeout != 5*time.Second {
		t.Fatalf("defaults: %q %v %v, %v", cfg.ProbeAddr, cfg.DatabaseStatementTimeout, cfg.DatabaseConnectTimeout, err)
	}
	cfg, err = Load(envOf(map[string]string{"PROBE_ADDR": ":8081", "DATABASE_STATEMENT_TIMEOUT": "1500ms", "DATABASE_CONNECT_TIMEOUT": "2s"}), Needs{})
	if err != nil || cfg.ProbeAddr != ":8081" || cfg.DatabaseStatementTimeout != 1500*time.Millisecond || cfg.DatabaseConnectTimeout != 2*time.Second {
		t.Fatalf("set: %q %v %v, %v", cfg.ProbeAddr, cfg.DatabaseStatementTimeout, cfg.DatabaseConnectTimeout, err)
	}
	cfg, err = Load(envOf(map[string]string{"HTTP_ADDR": ":0", "API_METRICS_ADDR": ":0", "PROBE_ADDR": ":0"}), Needs{})
	if err != nil || cfg.ProbeAddr != ":0" {
		t.Fatalf("every listener on port 0: %q, %v", cfg.ProbeAddr, err)
	}
	for env, want := range map[string]string{
		"PROBE_ADDR=8081":                  `PROBE_ADDR must be host:port or :port, got "8081"`,
		"PROBE_ADDR=:8080":                 "PROBE_ADDR must differ from HTTP_ADDR and API_METRICS_ADDR",
		"DATABASE_STATEMENT_TIMEOUT=50ms":  "DATABASE_STATEMENT_TIMEOUT must be a duration of at least 100ms",
		"DATABASE_STATEMENT_TIMEOUT=often": "DATABASE_STATEMENT_TIMEOUT must be a duration",
		"DATABASE_CONNECT_TIMEOUT=0":       "DATABASE_CONNECT_TIMEOUT must be a duration of at least 100ms",
	} {
		k, v, _ := strings.Cut(env, "=")
		if _, err := Load(envOf(map[string]string{k: v}), Needs{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error containing %q", env, err, want)
		}
	}
}

// TestHTTPBound: the default PUBLIC_URL names the port the API listens on,
// the one it took when HTTP_ADDR asks for port 0; one that is set stays.
func TestHTTPBound(t *testing.T) {
	for _, c := range []struct {
		env   map[string]string
		bound string
		want  string
	}{
		{map[string]string{"HTTP_ADDR": "127.0.0.1:0"}, "127.0.0.1:43117", "http://127.0.0.1:43117"},
		{map[string]string{"HTTP_ADDR": ":0"}, "[::]:43117", "http://127.0.0.1:43117"},
		{map[string]string{}, "[::]:8080", "http://127.0.0.1:8080"},
		{map[string]string{"HTTP_ADDR": "10.0.0.7:8080"}, "10.0.0.7:8080", "http://10.0.0.7:8080"},
		{map[string]string{"HTTP_ADDR": "127.0.0.1:0", "PUBLIC_URL": "https://pay.example.com/"}, "127.0.0.1:43117", "https://pay.example.com"},
	} {
		cfg, err := Load(envOf(c.env), Needs{})
		if err != nil {
			t.Fatal(err)
		}
		cfg.HTTPBound(c.bound)
		if cfg.PublicURL != c.want {
			t.Errorf("%v bound to %s: PUBLIC_URL %q, want %q", c.env, c.bound, cfg.PublicURL, c.want)
		}
	}
}

// TestWebhookMerchantSlots: WEBHOOK_MERCHANT_SLOTS is 25 by default, takes
// 1 to 100 (the worker's delivery slots) and names itself in the error for
// anything else.
func TestWebhookMerchantSlots(t *testing.T) {
	for _, c := range []struct {
		value string
		want  int // 0: an error
	}{{"", 25}, {"1", 1}, {"40", 40}, {"100", 100}, {"0", 0}, {"101", 0}, {"-3", 0}, {"many", 0}} {
		cfg, err := Load(envOf(map[string]string{"WEBHOOK_MERCHANT_SLOTS": c.value}), Needs{})
		switch {
		case c.want == 0 && (err == nil || !strings.Contains(err.Error(), "WEBHOOK_MERCHANT_SLOTS")):
			t.Errorf("WEBHOOK_MERCHANT_SLOTS=%q: error %v, want one naming the setting", c.value, err)
		case c.want != 0 && err != nil:
			t.Errorf("WEBHOOK_MERCHANT_SLOTS=%q: %v", c.value, err)
		case c.want != 0 && cfg.WebhookMerchantSlots != c.want:
			t.Errorf("WEBHOOK_MERCHANT_SLOTS=%q: got %d, want %d", c.value, cfg.WebhookMerchantSlots, c.want)
		}
	}
}

// TestRetention: events and the delivery log are kept 30 days by default;
// a retention under a minute, or a delivery log shorter than the retry
// schedule (a delivery dropped while retried), stops the program at start.
func TestRetention(t *testing.T) {
	c, err := Load(envOf(valid), Needs{Database: true})
	if err != nil || c.EventRetention != 720*time.Hour || c.WebhookLogRetention != 720*time.Hour {
		t.Fatalf("defaults: %s, %s, %v", c.EventRetention, c.WebhookLogRetention, err)
	}
	cases := []struct {
		env map[string]string
		bad string
	}{
		{map[string]string{"EVENT_RETENTION": "3m", "WEBHOOK_LOG_RETENTION": "3m", "WEBHOOK_RETRY_SCHEDULE": "0s,10s,20s"}, ""},
		{map[string]string{"EVENT_RETENTION": "30s"}, "EVENT_RETENTION"},
		{map[string]string{"WEBHOOK_LOG_RETENTION": "forever"}, "WEBHOOK_LOG_RETENTION"},
		{map[string]string{"WEBHOOK_LOG_RETENTION": "24h"}, "WEBHOOK_LOG_RETENTION must be at least the sum of WEBHOOK_RETRY_SCHEDULE (26h35m0s)"},
	}
	for _, tc := range cases {
		env := map[string]string{}
		for k, v := range valid {
			env[k] = v
		}
		for k, v := range tc.env {
			env[k] = v
		}
		_, err := Load(envOf(env), Needs{Database: true})
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%v: %v", tc.env, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("%v: %v, want an error naming %s", tc.env, err, tc.bad)
		}
	}
}

// TestWebhookQueues: WEBHOOK_QUEUES is 8 by default, takes 1 to 64 and
// names itself in the error for anything else.
func TestWebhookQueues(t *testing.T) {
	for _, c := range []struct {
		value string
		want  int // 0: an error
	}{{"", 8}, {"1", 1}, {"16", 16}, {"64", 64}, {"0", 0}, {"65", 0}, {"-1", 0}, {"eight", 0}} {
		cfg, err := Load(envOf(map[string]string{"WEBHOOK_QUEUES": c.value}), Needs{})
		switch {
		case c.want == 0 && (err == nil || !strings.Contains(err.Error(), "WEBHOOK_QUEUES")):
			t.Errorf("WEBHOOK_QUEUES=%q: error %v, want one naming the setting", c.value, err)
		case c.want != 0 && err != nil:
			t.Errorf("WEBHOOK_QUEUES=%q: %v", c.value, err)
		case c.want != 0 && cfg.WebhookQueues != c.want:
			t.Errorf("WEBHOOK_QUEUES=%q: got %d, want %d", c.value, cfg.WebhookQueues, c.want)
		}
	}
}

// TestBlankIsUnset: a blank value is the default, and values are trimmed,
// except JWT_SECRET, which is taken as given.
func TestBlankIsUnset(t *testing.T) {
	secret := " " + strings.Repeat("j", 32) + "\n"
	c, err := Load(envOf(map[string]string{"HTTP_ADDR": "  ", "LOG_LEVEL": "\t", "WEBHOOK_QUEUES": " 12 ", "JWT_SECRET": secret}), Needs{JWT: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != ":8080" || c.LogLevel != slog.LevelInfo || c.WebhookQueues != 12 || c.JWTSecret.Reveal() != secret {
		t.Fatalf("got %q %v %d %q", c.HTTPAddr, c.LogLevel, c.WebhookQueues, c.JWTSecret.Reveal())
	}
	if _, err := Load(envOf(map[string]string{"JWT_SECRET": "   "}), Needs{}); err == nil || !strings.Contains(err.Error(), "JWT_SECRET must be at least 32 bytes, got 3") {
		t.Fatalf("a blank JWT_SECRET is kept, and refused: %v", err)
	}
}

// TestAdminToken: ADMIN_TOKEN is required, and checked, only while
// ADMIN_ADDR is set.
func TestAdminToken(t *testing.T) {
	long := strings.Repeat("a", 32)
	for _, c := range []struct {
		addr, token string
		ok          bool
	}{{"", "", true}, {"", "short", true}, {":9092", long, true}, {":9092", "", false}, {":9092", "short", false}} {
		_, err := Load(envOf(map[string]string{"ADMIN_ADDR": c.addr, "ADMIN_TOKEN": c.token}), Needs{})
		if c.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "ADMIN_TOKEN must be at least 32 bytes when ADMIN_ADDR is set")) {
			t.Errorf("ADMIN_ADDR=%q ADMIN_TOKEN=%q: %v", c.addr, c.token, err)
		}
	}
}

// TestProblemsInOrder: the problems come in the order of the declarations
// (and of docs/settings.md), one per variable.
func TestProblemsInOrder(t *testing.T) {
	_, err := Load(envOf(map[string]string{"WEBHOOK_LOG_RETENTION": "30s", "HTTP_MAX_CONNS": "abc", "DATABASE_POOL_MODE": "x"}), Needs{})
	want := `invalid configuration: DATABASE_POOL_MODE must be session or transaction, got "x"; HTTP_MAX_CONNS must be a positive integer; WEBHOOK_LOG_RETENTION must be a duration of at least 1m such as 720h`
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}

// TestDeclarations: the tags agree with the constants the rest of Gatehouse
// uses, and every setting says who reads it.
func TestDeclarations(t *testing.T) {
	seen := map[string]bool{}
	for i, s := range settings() {
		if seen[s.Name] {
			t.Errorf("%s is declared twice", s.Name)
		}
		seen[s.Name] = true
		if i == 0 && s.Group == "" {
			t.Errorf("%s, the first setting, starts no group", s.Name)
		}
		if len(s.By) == 0 {
			t.Errorf("%s has no by tag", s.Name)
		}
		switch s.Name {
		case "DEFAULT_PROVIDER":
			if fmt.Sprint(s.oneof) != fmt.Sprint(Providers) {
				t.Errorf("DEFAULT_PROVIDER takes %v, Providers is %v", s.oneof, Providers)
			}
		case "WEBHOOK_QUEUES":
			if s.Default != fmt.Sprint(DefaultWebhookQueues) {
				t.Errorf("WEBHOOK_QUEUES defaults to %s, DefaultWebhookQueues is %d", s.Default, DefaultWebhookQueues)
			}
		}
	}
	c, err := Load(envOf(nil), Needs{})
	if err != nil || c.MaxConcurrentHashes != DefaultMaxConcurrentHashes() {
		t.Fatalf("MAX_CONCURRENT_HASHES unset: %d, %v", c.MaxConcurrentHashes, err)
	}
}
