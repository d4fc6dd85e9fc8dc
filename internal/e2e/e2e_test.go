package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// Limits of api/openapi.yaml, which the binaries run with by default.
const (
	chargesLimit = 100 // POST /v1/charges, per API key per minute
	loginLimit   = 10  // POST /v1/auth/login, per IP per 5 minutes
	defaultLimit = 500 // everything else, per IP per minute
)

// chargeBody is a valid sandbox charge with a test card that succeeds.
const chargeBody = `{"amount":2000,"currency":"usd","payment_method":"card",
"card":{"number":"4242424242424242","exp_month":12,"exp_year":2030,"cvc":"123"},"metadata":{"order_id":"1042"}}`

// apiKey is a key pair as the creation response returns it.
type apiKey struct {
	ID        string  `json:"id"`
	Object    string  `json:"object"`
	SecretKey string  `json:"secret_key"`
	PublicKey string  `json:"public_key"`
	RevokedAt *string `json:"revoked_at"`
}

// TestEndToEnd runs the real binaries, two API replicas and a worker, and
// checks what only the whole system can show: revocations and logouts seen by
// every replica at once, limits shared by the replicas through Redis, and the
// behaviour when Redis is flushed or down. The scenarios share one stack and
// run in order; each uses its own client address so per-IP limits do not
// interfere.
func TestEndToEnd(t *testing.T) {
	parallel(t)
	began := time.Now()
	// Skip (or fail) for a missing service before the slow build.
	redisPath := testenv.RedisServerPath(t)
	db := testenv.NewDB(t)
	bins := buildBinaries(t)
	t.Logf("binaries built in %s", bins.took.Round(time.Millisecond))

	var spec *testenv.Spec
	t.Run("openapi_spec_loads", func(t *testing.T) { spec = testenv.LoadSpec(t) })
	if spec == nil {
		t.Log("api/openapi.yaml did not load: responses are NOT validated against it")
	}

	stackStart := time.Now()
	st := startStack(t, bins, db, redisPath, spec)
	r1, r2 := st.replicas[0], st.replicas[1]
	t.Logf("stack ready in %s: api-1 %s, api-2 %s, worker %s, redis (%s) %s",
		time.Since(stackStart).Round(time.Millisecond), r1, r2, st.worker, st.redis.mode, st.redis.url())

	// A merchant, a session and three keys, all made through replica 1.
	email := "e2e-" + harness.RandomHex(6) + "@example.com"
	password := "correct horse " + harness.RandomHex(8)
	merchantID := st.createMerchant(t, email, password, "E2E Merchant")
	credentials := fmt.Sprintf(`{"email":%q,"password":%q}`, email, password)
	setup := newClient(t, "127.0.0.2")
	login := st.login(t, setup, r1, credentials)
	mustExpect(t, login, http.StatusOK, "")
	var session struct {
		Token    string `json:"token"`
		Merchant struct {
			ID string `json:"id"`
		} `json:"merchant"`
	}
	decode(t, login, &session)
	if session.Token == "" || session.Merchant.ID != merchantID {
		t.Fatalf("login: got token %q, merchant %q; want a token and merchant %q", session.Token, session.Merchant.ID, merchantID)
	}
	sessionJWT := session.Token
	newKey := func(name string) apiKey {
		t.Helper()
		e := st.do(t, setup, http.MethodPost, r1+"/v1/me/api_keys", sessionJWT, fmt.Sprintf(`{"name":%q}`, name))
		mustExpect(t, e, http.StatusCreated, "")
		var k apiKey
		decode(t, e, &k)
		if !strings.HasPrefix(k.ID, "key_") || !strings.HasPrefix(k.SecretKey, "sk_test_") || k.RevokedAt != nil {
			t.Fatalf("create key: got id %q, secret %q, revoked_at %v; want key_..., sk_test_..., null", k.ID, k.SecretKey, k.RevokedAt)
		}
		return k
	}
	revokedKey := newKey("e2e revoked")
	chargesKey := newKey("e2e charges")
	validKey := newKey("e2e valid")
	var loggedOutJWT string // set by scenario b

	// replicaOf spreads requests alternately over the two replicas.
	replicaOf := func(i int) string { return st.replicas[i%2] }

	t.Run("a_revoked_key_refused_by_other_replica", func(t *testing.T) {
		c := newClient(t, "127.0.0.3")
		warm := st.do(t, c, http.MethodGet, r2+"/v1/me", revokedKey.SecretKey, "")
		mustExpect(t, warm, http.StatusOK, "")
		var me struct {
			ID string `json:"id"`
		}
		decode(t, warm, &me)
		if me.ID != merchantID {
			t.Errorf("GET /v1/me with the key: got merchant %q, want %q", me.ID, merchantID)
		}
		// The shared key cache now holds the key as active (the layout of
		// internal/cache: gh:key:{<hex sha256 of the secret>}), so a refusal
		// below proves the revoke overwrote it, not that replica 2 missed it.
		digest := sha256.Sum256([]byte(revokedKey.SecretKey))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		n, err := st.redis.client.Exists(ctx, "gh:key:{"+hex.EncodeToString(digest[:])+"}").Result()
		cancel()
		if err != nil || n != 1 {
			t.Errorf("key cache entry after warming replica 2: got %d (err %v), want 1", n, err)
		}

		// Revoke on replica 1 and ask replica 2 straight away; both answers
		// are validated afterwards so that nothing runs in between.
		revoke, err := send(c, http.MethodDelete, r1+"/v1/me/api_keys/"+revokedKey.ID, revokedKey.SecretKey, "")
		if err != nil {
			t.Fatalf("revoke: %v", err)
		}
		first, err := send(c, http.MethodGet, r2+"/v1/me", revokedKey.SecretKey, "")
		if err != nil {
			t.Fatalf("first request after the revoke: %v", err)
		}
		propagation := first.end.Sub(revoke.end)
		st.check(t, revoke)
		st.check(t, first)
		mustExpect(t, revoke, http.StatusOK, "")
		var k apiKey
		decode(t, revoke, &k)
		if k.ID != revokedKey.ID || k.Object != "api_key" || k.RevokedAt == nil || k.SecretKey != "" {
			t.Errorf("revoke: got id %q, object %q, revoked_at %v, secret_key %q; want %q, api_key, a time, none",
				k.ID, k.Object, k.RevokedAt, k.SecretKey, revokedKey.ID)
		}

		expect(t, first, http.StatusUnauthorized, "token_revoked")
		t.Logf("revocation propagation: %s (first request on replica 2 after the revoke response)", propagation.Round(time.Microsecond))
		expect(t, st.do(t, c, http.MethodGet, r1+"/v1/me", revokedKey.SecretKey, ""), http.StatusUnauthorized, "token_revoked")
		expect(t, st.do(t, c, http.MethodGet, r2+"/v1/me/api_keys", revokedKey.SecretKey, ""), http.StatusUnauthorized, "token_revoked")
	})

	t.Run("b_logged_out_jwt_refused_by_other_replica", func(t *testing.T) {
		c := newClient(t, "127.0.0.4")
		e := st.do(t, c, http.MethodPost, r1+"/v1/auth/login", "", credentials)
		mustExpect(t, e, http.StatusOK, "")
		var l struct {
			Token string `json:"token"`
		}
		decode(t, e, &l)
		mustExpect(t, st.do(t, c, http.MethodGet, r2+"/v1/me", l.Token, ""), http.StatusOK, "")
		mustExpect(t, st.do(t, c, http.MethodDelete, r1+"/v1/auth/logout", l.Token, ""), http.StatusNoContent, "")
		loggedOutJWT = l.Token
		expect(t, st.do(t, c, http.MethodGet, r2+"/v1/me", l.Token, ""), http.StatusUnauthorized, "token_revoked")
		expect(t, st.do(t, c, http.MethodGet, r1+"/v1/me", l.Token, ""), http.StatusUnauthorized, "token_revoked")
		expect(t, st.do(t, c, http.MethodDelete, r2+"/v1/auth/logout", l.Token, ""), http.StatusUnauthorized, "token_revoked")
		// Another session of the same merchant is untouched.
		expect(t, st.do(t, c, http.MethodGet, r2+"/v1/me", sessionJWT, ""), http.StatusOK, "")
	})

	t.Run("c_charge_limit_shared_by_replicas", func(t *testing.T) {
		const total, workers = chargesLimit + 1, 8
		c := newClient(t, "127.0.0.5")
		results := make([]exchange, total)
		errs := make([]error, total)
		next := make(chan int)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := range next {
					results[i], errs[i] = send(c, http.MethodPost, replicaOf(i)+"/v1/charges", chargesKey.SecretKey, chargeBody)
				}
			})
		}
		for i := range total {
			next <- i
		}
		close(next)
		wg.Wait()

		limited, created := 0, 0
		for i, e := range results {
			if errs[i] != nil {
				t.Errorf("request %d: %v", i, errs[i])
				continue
			}
			st.check(t, e)
			switch {
			case e.status() == http.StatusTooManyRequests:
				limited++
				checkTooManyRequests(t, e, chargesLimit)
			case e.status() == http.StatusCreated:
				created++
				checkRateLimitHeaders(t, e, chargesLimit)
			default:
				t.Errorf("request %d: %s: got %d %q, want 201 or 429 rate_limited", i, e.describe(), e.status(), e.code())
			}
		}
		t.Logf("accepted in window: %d of %d", total-limited, total)
		if limited != 1 || created != chargesLimit {
			t.Errorf("over both replicas: got %d x 429 and %d x 201, want 1 x 429 and %d x 201", limited, created, chargesLimit)
		}
	})

	t.Run("d_login_limit_per_ip_shared_by_replicas", func(t *testing.T) {
		c := newClient(t, "127.0.0.11")
		var took []time.Duration
		for i := range loginLimit + 1 {
			e := st.do(t, c, http.MethodPost, replicaOf(i)+"/v1/auth/login", "", credentials)
			if i == loginLimit {
				checkTooManyRequests(t, e, loginLimit)
				break
			}
			if !expect(t, e, http.StatusOK, "") {
				continue
			}
			took = append(took, e.elapsed())
			checkRateLimitHeaders(t, e, loginLimit)
			if got, ok := intHeader(t, e, "RateLimit-Remaining"); ok && got != loginLimit-i-1 {
				t.Errorf("login %d: RateLimit-Remaining: got %d, want %d", i+1, got, loginLimit-i-1)
			}
		}
		if len(took) > 0 {
			slices.Sort(took)
			mid := len(took) / 2
			p50 := took[mid]
			if len(took)%2 == 0 {
				p50 = (took[mid-1] + took[mid]) / 2
			}
			t.Logf("login time p50: %s (of %d successful logins; min %s, max %s)", p50.Round(time.Microsecond),
				len(took), took[0].Round(time.Microsecond), took[len(took)-1].Round(time.Microsecond))
		}
		// The limit is per client address: another address still logs in.
		expect(t, st.login(t, newClient(t, "127.0.0.12"), r2, credentials), http.StatusOK, "")
	})

	t.Run("e_redis_flush_postgres_decides", func(t *testing.T) {
		if loggedOutJWT == "" {
			t.Fatal("scenario b did not log a session out")
		}
		st.redis.flushAll(t)
		c := newClient(t, "127.0.0.6")
		// Twice on each replica: the first read misses the flushed cache and
		// refills it from Postgres, the second is answered by the refill.
		for range 2 {
			for _, r := range st.replicas {
				expect(t, st.do(t, c, http.MethodGet, r+"/v1/me", revokedKey.SecretKey, ""), http.StatusUnauthorized, "token_revoked")
				expect(t, st.do(t, c, http.MethodGet, r+"/v1/me", loggedOutJWT, ""), http.StatusUnauthorized, "token_revoked")
				expect(t, st.do(t, c, http.MethodGet, r+"/v1/me", validKey.SecretKey, ""), http.StatusOK, "")
				expect(t, st.do(t, c, http.MethodGet, r+"/v1/me", sessionJWT, ""), http.StatusOK, "")
			}
		}
	})

	t.Run("f_redis_down_degrades_gracefully", func(t *testing.T) {
		if loggedOutJWT == "" {
			t.Fatal("scenario b did not log a session out")
		}
		st.redis.stop(t)
		down := time.Now()
		c := newClient(t, "127.0.0.7")
		var slowest exchange
		do := func(method, url, token, body string) exchange {
			t.Helper()
			e := st.do(t, c, method, url, token, body)
			if slowest.req == nil || e.elapsed() > slowest.elapsed() {
				slowest = e
			}
			return e
		}

		for _, r := range st.replicas {
			for range 3 { // more than one, so both the first failure and the open breaker are exercised
				e := do(http.MethodGet, r+"/v1/me", validKey.SecretKey, "")
				expect(t, e, http.StatusOK, "")
				checkRateLimitHeaders(t, e, defaultLimit)
			}
			e := do(http.MethodGet, r+"/v1/me", revokedKey.SecretKey, "")
			expect(t, e, http.StatusUnauthorized, "token_revoked")
			checkRateLimitHeaders(t, e, defaultLimit)
			expect(t, do(http.MethodGet, r+"/v1/me", loggedOutJWT, ""), http.StatusUnauthorized, "token_revoked")
			expect(t, do(http.MethodGet, r+"/v1/me", sessionJWT, ""), http.StatusOK, "")

			// Charges are still accepted; their tasks wait in the outbox.
			e = do(http.MethodPost, r+"/v1/charges", validKey.SecretKey, chargeBody)
			expect(t, e, http.StatusCreated, "")
			checkRateLimitHeaders(t, e, chargesLimit)
		}

		// Login works, and the new session is honoured by the other replica
		// from Postgres alone.
		for i, r := range st.replicas {
			e := do(http.MethodPost, r+"/v1/auth/login", "", credentials)
			if !expect(t, e, http.StatusOK, "") {
				continue
			}
			checkRateLimitHeaders(t, e, loginLimit)
			var l struct {
				Token string `json:"token"`
			}
			decode(t, e, &l)
			expect(t, do(http.MethodGet, st.replicas[(i+1)%2]+"/v1/me", l.Token, ""), http.StatusOK, "")
		}

		for _, r := range st.replicas {
			expect(t, do(http.MethodGet, r+"/readyz", "", ""), http.StatusServiceUnavailable, "service_unavailable")
		}
		if e := st.do(t, c, http.MethodGet, st.worker+"/readyz", "", ""); e.status() != http.StatusServiceUnavailable {
			t.Errorf("worker %s: got %d, want 503; body: %s", e.describe(), e.status(), e.body)
		}

		for _, r := range st.replicas {
			e := do(http.MethodGet, r+"/metrics", "", "")
			if !expect(t, e, http.StatusOK, "") {
				continue
			}
			if got, found := metricSum(string(e.body), "gatehouse_ratelimit_fallback_total"); !found || got <= 0 {
				t.Errorf("%s/metrics: gatehouse_ratelimit_fallback_total: got %v (found %v), want > 0", r, got, found)
			}
			// Label values must be the requests' real methods, never bytes of
			// a buffer the server has since reused for another request.
			for _, m := range labelValues(string(e.body), "gatehouse_http_requests_total", "method") {
				if !slices.Contains(httpMethods, m) {
					t.Errorf("%s/metrics: gatehouse_http_requests_total has method=%q, want one of %v", r, m, httpMethods)
				}
			}
		}
		t.Logf("served without Redis for %s; slowest API request: %s (%s)", time.Since(down).Round(time.Millisecond),
			slowest.elapsed().Round(time.Millisecond), slowest.describe())

		st.redis.start(t)
		restarted := time.Now()
		const within = waitFloor
		for _, base := range []string{r1, r2, st.worker} {
			for {
				e := st.do(t, c, http.MethodGet, base+"/readyz", "", "")
				if e.status() == http.StatusOK {
					break
				}
				if time.Since(restarted) > within {
					t.Errorf("%s/readyz %s after Redis restarted: got %d, want 200; body: %s", base, within, e.status(), e.body)
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		t.Logf("readyz back to 200 on all three %s after Redis restarted", time.Since(restarted).Round(time.Millisecond))
		for _, r := range st.replicas {
			e := st.do(t, c, http.MethodGet, r+"/v1/me", validKey.SecretKey, "")
			expect(t, e, http.StatusOK, "")
			checkRateLimitHeaders(t, e, defaultLimit)
			expect(t, st.do(t, c, http.MethodGet, r+"/v1/me", revokedKey.SecretKey, ""), http.StatusUnauthorized, "token_revoked")
		}
	})

	t.Logf("end-to-end scenarios took %s (excluding the build: %s)",
		time.Since(began).Round(time.Millisecond), time.Since(stackStart).Round(time.Millisecond))
}
