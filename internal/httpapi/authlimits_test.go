package httpapi_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/cache"
)

// countingKeys counts the key lookups that reach Postgres.
type countingKeys struct {
	apikeys.Store
	lookups atomic.Int64
}

func (c *countingKeys) KeyByDigest(ctx context.Context, digest []byte) (apikeys.Key, error) {
	c.lookups.Add(1)
	return c.Store.KeyByDigest(ctx, digest)
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// dbsize is the number of keys in the harness's Redis DB.
func (h *harness) dbsize() int64 {
	h.t.Helper()
	n, err := h.rdb.DBSize(context.Background()).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// checkLimited fails unless r is the contract's 429: rate_limited, an
// integer Retry-After >= 1 and the RateLimit-* headers of limit.
func checkLimited(t *testing.T, r response, limit int) {
	t.Helper()
	want(t, r, 429, "rate_limited")
	if n, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || n < 1 {
		t.Fatalf("429 Retry-After %q, want an integer >= 1", r.header.Get("Retry-After"))
	}
	if r.header.Get("RateLimit-Limit") != strconv.Itoa(limit) || r.header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("429 RateLimit-Limit %q Remaining %q, want %d and 0", r.header.Get("RateLimit-Limit"), r.header.Get("RateLimit-Remaining"), limit)
	}
	if _, err := strconv.Atoi(r.header.Get("RateLimit-Reset")); err != nil {
		t.Fatalf("429 RateLimit-Reset %q", r.header.Get("RateLimit-Reset"))
	}
}

// TestUnknownKeysAreLimitedPerAddress: a flood of random secret keys on the
// charge route (limited per key, which an unknown key has not) counts
// against the per-address default limit: 401 up to the limit, then 429
// before any lookup; Postgres sees at most the limit of lookups (plus one) and Redis
// no new key per request. Valid keys from other addresses are untouched.
func TestUnknownKeysAreLimitedPerAddress(t *testing.T) {
	t.Parallel()
	const limit = 20
	keys := &countingKeys{}
	h := newHarnessWith(t, harnessOptions{
		env:      func(env map[string]string) { env["RATE_LIMIT_DEFAULT"] = strconv.Itoa(limit) + "/1m" },
		keyStore: func(s apikeys.Store) apikeys.Store { keys.Store = s; return keys },
	})
	a := h.account("ada@example.com")
	attacker := clientFrom(t, "127.0.0.2")
	lookups, size := keys.lookups.Load(), h.dbsize()

	const n = 200
	for i := range n {
		r := h.doWith(attacker, "POST", "/v1/charges", `{"amount":100,"currency":"usd"}`, bearer("sk_test_"+randomHex(t, 16))...)
		if i < limit {
			want(t, r, 401, "invalid_token")
			if r.header.Get("RateLimit-Limit") != strconv.Itoa(limit) || r.header.Get("RateLimit-Remaining") != strconv.Itoa(limit-1-i) {
				t.Fatalf("401 #%d: RateLimit-Limit %q Remaining %q", i, r.header.Get("RateLimit-Limit"), r.header.Get("RateLimit-Remaining"))
			}
			continue
		}
		checkLimited(t, r, limit)
	}
	// The request that finds the address over its limit has looked its key
	// up: one more than the limit, once per replica and window.
	if got := keys.lookups.Load() - lookups; got > limit+1 {
		t.Errorf("%d unknown keys from one address cost %d Postgres lookups, want at most the limit %d + 1", n, got, limit)
	}
	if grew := h.dbsize() - size; grew > 1 {
		t.Errorf("Redis grew by %d keys for %d unknown keys, want at most 1 (the address's window)", grew, n)
	}
	// The limited address's valid key is refused too while it is over; other
	// addresses are not affected.
	checkLimited(t, h.doWith(attacker, "POST", "/v1/charges", `{}`, bearer(a.secret)...), limit)
	want(t, h.do("POST", "/v1/charges", `{}`, bearer(a.secret)...), 400, "parameter_missing")
	want(t, h.do("POST", "/v1/charges", `{}`, bearer("sk_test_"+randomHex(t, 16))...), 401, "invalid_token")
}

// TestBadSessionTokensAreLimitedPerAddress: the same for bad and forged
// session tokens on a session route.
func TestBadSessionTokensAreLimitedPerAddress(t *testing.T) {
	t.Parallel()
	const limit = 20
	h := newHarness(t, func(env map[string]string) { env["RATE_LIMIT_DEFAULT"] = strconv.Itoa(limit) + "/1m" })
	a := h.account("ada@example.com")
	attacker := clientFrom(t, "127.0.0.3")
	size := h.dbsize()
	forged := a.token[:len(a.token)-4] + "AAAA"
	for i := range 100 {
		tok := forged
		if i%2 == 1 {
			tok = "eyJhbGciOiJIUzI1NiJ9." + randomHex(t, 8) + ".x"
		}
		r := h.doWith(attacker, "POST", "/v1/me/api_keys", `{"name":"x"}`, bearer(tok)...)
		if i < limit {
			want(t, r, 401, "invalid_token")
			continue
		}
		checkLimited(t, r, limit)
	}
	if grew := h.dbsize() - size; grew > 1 {
		t.Errorf("Redis grew by %d keys for 100 bad tokens, want at most 1", grew)
	}
	want(t, h.do("GET", "/v1/me", "", bearer(a.token)...), 200, "")
}

// readOnlyRedis creates a Redis ACL user that may read but not write and
// returns the URL of the harness's DB as that user, and a function that
// grants or withdraws its writes (ACL changes apply to open connections).
func readOnlyRedis(t *testing.T, admin *harness) (string, func(writable bool)) {
	t.Helper()
	ctx := context.Background()
	user, password := "gh_ro_"+randomHex(t, 4), randomHex(t, 16)
	set := func(writable bool) {
		t.Helper()
		perm := "-@write"
		if writable {
			perm = "+@write"
		}
		if err := admin.rdb.Do(ctx, "ACL", "SETUSER", user, "on", ">"+password, "~*", "&*", "+@all", perm).Err(); err != nil {
			t.Fatalf("ACL SETUSER: %v", err)
		}
	}
	set(false)
	t.Cleanup(func() { admin.rdb.Do(context.Background(), "ACL", "DELUSER", user) })
	u, err := url.Parse(admin.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	// The user really cannot write.
	ro, err := cache.DialQueue(u.String(), "single")
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.Get(ctx, "gh:probe").Err(); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("read-only user cannot read: %v", err)
	}
	if err := ro.Set(ctx, "gh:probe", "x", time.Second).Err(); err == nil {
		t.Fatal("read-only user can write")
	}
	return u.String(), set
}

// TestRevocationFailsClosed is docs/reliability.md F10 on two replicas sharing
// Postgres and Redis, one of which cannot write to Redis: a key revoked and
// a session logged out through that replica are refused on the other at once
// when the revoke is answered as done; when it is answered 503, a retry after
// the cache recovers makes them refused everywhere.
func TestRevocationFailsClosed(t *testing.T) {
	t.Parallel()
	healthy := newHarness(t, nil)
	roURL, writable := readOnlyRedis(t, healthy)
	broken := newHarnessWith(t, harnessOptions{replicaOf: healthy, redisURL: roURL})
	replicas := map[string]*harness{"healthy": healthy, "broken": broken}
	a := healthy.account("ada@example.com")
	_, admin := healthy.newKey(a.token)
	// Both replicas have served the key and the session: the shared cache
	// holds them as active.
	for name, h := range replicas {
		if r := h.do("GET", "/v1/me", "", bearer(a.secret)...); r.status != 200 {
			t.Fatalf("%s: key before revoke: %d %s", name, r.status, r.raw)
		}
		if r := h.do("GET", "/v1/me", "", bearer(a.token)...); r.status != 200 {
			t.Fatalf("%s: session before logout: %d %s", name, r.status, r.raw)
		}
	}

	// failedClosed checks an answer of the broken replica: done, and the
	// credential is refused on the healthy one at once; or 503, and a retry
	// once the cache is writable again is done and refused everywhere.
	failedClosed := func(what string, r response, done int, retry func() response, probe func(h *harness) response) {
		t.Helper()
		switch r.status {
		case done:
		case 503:
			want(t, r, 503, "service_unavailable")
			if n, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || n < 1 {
				t.Fatalf("%s: 503 Retry-After %q", what, r.header.Get("Retry-After"))
			}
			writable(true)
			defer writable(false)
			want(t, retry(), done, "")
		default:
			t.Fatalf("%s on the replica that cannot write to Redis: %d %s, want %d or 503", what, r.status, r.raw, done)
		}
		for _, name := range []string{"healthy", "broken"} {
			if got := probe(replicas[name]); got.status != 401 || got.errCode() != "token_revoked" {
				t.Fatalf("%s answered %d: %s replica then answers %d %s, want 401 token_revoked", what, r.status, name, got.status, got.raw)
			}
		}
	}

	revoke := func() response { return broken.do("DELETE", "/v1/me/api_keys/"+a.keyID, "", bearer(admin)...) }
	failedClosed("revoke", revoke(), 200, revoke, func(h *harness) response { return h.do("GET", "/v1/me", "", bearer(a.secret)...) })

	logout := func() response { return broken.do("DELETE", "/v1/auth/logout", "", bearer(a.token)...) }
	failedClosed("logout", logout(), 204, logout, func(h *harness) response { return h.do("GET", "/v1/me", "", bearer(a.token)...) })

	// Redis loses its data: Postgres holds both revocations.
	if err := healthy.rdb.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	want(t, healthy.do("GET", "/v1/me", "", bearer(a.secret)...), 401, "token_revoked")
	want(t, healthy.do("GET", "/v1/me", "", bearer(a.token)...), 401, "token_revoked")
	want(t, healthy.do("GET", "/v1/me", "", bearer(admin)...), 200, "")
}

// TestLoginAccountBudget: wrong passwords for one email from many addresses
// (each under its own per-address limit) exhaust the account's budget of
// failures; then attempts for that email from new addresses get 429 with
// Retry-After, an unknown email is treated the same, while the owner signs
// in from an address that signed in before, whatever the attackers keep
// doing.
func TestLoginAccountBudget(t *testing.T) {
	t.Parallel()
	const budget = 5
	h := newHarness(t, func(env map[string]string) {
		env["RATE_LIMIT_LOGIN_ACCOUNT"] = strconv.Itoa(budget) + "/1m"
	})
	const password = "correct horse battery"
	h.merchant("ada@example.com", password)
	login := func(c *http.Client, email, pw string) response {
		t.Helper()
		return h.doWith(c, "POST", "/v1/auth/login", `{"email":"`+email+`","password":"`+pw+`"}`)
	}
	owner := clientFrom(t, "127.0.0.10")
	want(t, login(owner, "ada@example.com", password), 200, "")

	attack := func(email string) (failed, limitedCount int) {
		t.Helper()
		for i := range 20 {
			c := clientFrom(t, "127.0.1."+strconv.Itoa(1+i%10))
			r := login(c, email, "guess "+strconv.Itoa(i))
			switch r.status {
			case 401:
				want(t, r, 401, "invalid_credentials")
				failed++
			case 429:
				checkLimited(t, r, budget)
				limitedCount++
			default:
				t.Fatalf("attempt %d for %s: %d %s", i, email, r.status, r.raw)
			}
		}
		return failed, limitedCount
	}
	// The A3 rule holds under throttling: a wrong password and an unknown
	// email meet the same budget and the same answers.
	for _, email := range []string{"ADA@example.com ", "nobody@example.com"} {
		failed, limitedCount := attack(email)
		if failed != budget || limitedCount != 20-budget {
			t.Fatalf("%s from 10 addresses: %d x 401 and %d x 429, want %d and %d", email, failed, limitedCount, budget, 20-budget)
		}
	}
	// The owner, from the address they signed in from, is not refused, and
	// a wrong password of theirs is a plain 401.
	want(t, login(owner, "ada@example.com", "typo"), 401, "invalid_credentials")
	want(t, login(owner, "ada@example.com", password), 200, "")
	// A new address is delayed while the budget is spent.
	checkLimited(t, login(clientFrom(t, "127.0.0.11"), "ada@example.com", password), budget)
}

// TestLoginAccountBudgetFrees: once the attack stops, the owner signs in
// from a new address after Retry-After.
func TestLoginAccountBudgetFrees(t *testing.T) {
	t.Parallel()
	// The window is long beside a sign-in's hashing: on a loaded machine,
	// with -race, the two failures and the third try took over 5 s, and
	// the first failure had left a window of 5 s before the third was
	// counted.
	h := newHarness(t, func(env map[string]string) { env["RATE_LIMIT_LOGIN_ACCOUNT"] = "2/20s" })
	const password = "correct horse battery"
	h.merchant("ada@example.com", password)
	login := func(c *http.Client, pw string) response {
		t.Helper()
		return h.doWith(c, "POST", "/v1/auth/login", `{"email":"ada@example.com","password":"`+pw+`"}`)
	}
	want(t, login(clientFrom(t, "127.0.1.1"), "guess 1"), 401, "invalid_credentials")
	want(t, login(clientFrom(t, "127.0.1.2"), "guess 2"), 401, "invalid_credentials")
	fresh := clientFrom(t, "127.0.0.11")
	r := login(fresh, password)
	checkLimited(t, r, 2)
	wait, _ := strconv.Atoi(r.header.Get("Retry-After"))
	time.Sleep(time.Duration(wait) * time.Second)
	// A few tries, well under the per-address limit, in case clocks differ.
	for range 5 {
		if r = login(fresh, password); r.status != 429 {
			break
		}
		time.Sleep(time.Second)
	}
	want(t, r, 200, "")
}
