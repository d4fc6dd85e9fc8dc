package ratelimit_test

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/cache"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/ratelimit"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newLimiter(t *testing.T, rdb redis.UniversalClient) (*ratelimit.Limiter, *ratelimit.Metrics) {
	t.Helper()
	m := ratelimit.NewMetrics(prometheus.NewRegistry())
	return ratelimit.New(rdb, m, quiet), m
}

// Several limiters (replicas) hammer one key concurrently: exactly N pass.
func TestSharedLimitIsExactAcrossReplicas(t *testing.T) {
	rdb := testenv.NewRedis(t, testenv.RedisDBRateLimit)
	replicas := make([]*ratelimit.Limiter, 3)
	for i := range replicas {
		replicas[i], _ = newLimiter(t, rdb)
	}
	limit := config.Limit{N: 100, Window: time.Minute}
	var allowed, denied atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 12; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 25; i++ {
				d := replicas[(g+i)%len(replicas)].Allow(context.Background(), "charges", "key_a", limit)
				if d.Local {
					t.Error("decided locally while Redis is up")
				}
				if d.Allowed {
					allowed.Add(1)
				} else {
					denied.Add(1)
					if d.RetryAfter() < 1 || d.RetryAfter() > 60 {
						t.Errorf("RetryAfter %d outside [1, 60]", d.RetryAfter())
					}
				}
			}
		}(g)
	}
	wg.Wait()
	if allowed.Load() != 100 || denied.Load() != 200 {
		t.Fatalf("allowed %d denied %d, want 100 and 200", allowed.Load(), denied.Load())
	}
	// Other keys and other limits are independent.
	if d := replicas[0].Allow(context.Background(), "charges", "key_b", limit); !d.Allowed || d.Remaining != 99 {
		t.Fatalf("key_b: %+v", d)
	}
}

// The window slides: capacity returns as the oldest requests age out, not all at once.
func TestWindowSlides(t *testing.T) {
	rdb := testenv.NewRedis(t, testenv.RedisDBRateLimit)
	l, _ := newLimiter(t, rdb)
	// Seconds of room for a loaded machine: between the first request and
	// the third, which must still share the window with the first, and
	// after the first leaves, while the second must still be in it.
	limit := config.Limit{N: 2, Window: 4 * time.Second}
	const apart = 2 * time.Second
	ctx := context.Background()
	first := l.Allow(ctx, "t", "k", limit)
	time.Sleep(apart)
	second := l.Allow(ctx, "t", "k", limit)
	third := l.Allow(ctx, "t", "k", limit)
	if !first.Allowed || !second.Allowed || third.Allowed || third.Remaining != 0 {
		t.Fatalf("decisions %+v %+v %+v", first, second, third)
	}
	if third.Reset <= 0 || third.Reset > limit.Window-apart+100*time.Millisecond {
		t.Fatalf("Reset %v: want at most %s (until the first request leaves)", third.Reset, limit.Window-apart)
	}
	time.Sleep(third.Reset + 50*time.Millisecond)
	if d := l.Allow(ctx, "t", "k", limit); !d.Allowed {
		t.Fatalf("after the first request left the window: %+v", d)
	}
	if d := l.Allow(ctx, "t", "k", limit); d.Allowed {
		t.Fatalf("the second request is still in the window: %+v", d)
	}
}

func TestFallsBackToLocalWhenRedisIsDown(t *testing.T) {
	rdb, err := cache.NewClient("redis://127.0.0.1:1/0") // nothing listens on port 1
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	l, m := newLimiter(t, rdb)
	limit := config.Limit{N: 3, Window: time.Minute}
	var allowed int
	for i := 0; i < 5; i++ {
		d := l.Allow(context.Background(), "login", "127.0.0.1", limit)
		if !d.Local {
			t.Fatal("decision did not come from the local fallback")
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("allowed %d, want 3", allowed)
	}
	if got := testutil.ToFloat64(m.Fallbacks.WithLabelValues("login")); got != 5 {
		t.Fatalf("fallback counter %v, want 5", got)
	}
}

// The local limiter never accepts more than N in any trailing window, under
// random arrivals on a fake clock.
func TestLocalNeverExceedsLimitInAnyWindow(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	local := ratelimit.NewLocal(func() time.Time { return now })
	limit := config.Limit{N: 5, Window: 10 * time.Second}
	var accepted []time.Time
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 5000; i++ {
		now = now.Add(time.Duration(r.IntN(4000)) * time.Millisecond)
		d := local.Allow("k", limit)
		if d.Allowed {
			accepted = append(accepted, now)
		} else if d.RetryAfter() < 1 {
			t.Fatalf("RetryAfter %d", d.RetryAfter())
		}
	}
	for i := range accepted {
		j := i
		for j < len(accepted) && accepted[j].Sub(accepted[i]) < limit.Window {
			j++
		}
		if j-i > limit.N {
			t.Fatalf("%d accepted within %v starting at %v", j-i, limit.Window, accepted[i])
		}
	}
	if len(accepted) < 1000 {
		t.Fatalf("only %d accepted: the limiter is too strict", len(accepted))
	}
}

// Over remembers a refusal on the replica that saw it, until the window frees,
// and nothing else.
func TestOverRemembersRefusals(t *testing.T) {
	rdb := testenv.NewRedis(t, testenv.RedisDBRateLimit)
	l, _ := newLimiter(t, rdb)
	other, _ := newLimiter(t, rdb)
	ctx := context.Background()
	limit := config.Limit{N: 2, Window: 2 * time.Second}
	for i := range 2 {
		if !l.Allow(ctx, "default", "10.0.0.1", limit).Allowed {
			t.Fatalf("request %d refused", i)
		}
		if _, over := l.Over("default", "10.0.0.1"); over {
			t.Fatalf("over after %d allowed requests", i+1)
		}
	}
	if l.Allow(ctx, "default", "10.0.0.1", limit).Allowed {
		t.Fatal("third request allowed")
	}
	d, over := l.Over("default", "10.0.0.1")
	if !over || d.Allowed || d.Remaining != 0 || d.Limit != 2 || d.RetryAfter() < 1 || d.RetryAfter() > 2 {
		t.Fatalf("Over after a refusal: %+v %v", d, over)
	}
	if _, over := l.Over("default", "10.0.0.2"); over {
		t.Fatal("another key is over")
	}
	if _, over := l.Over("login", "10.0.0.1"); over {
		t.Fatal("another limit is over")
	}
	if _, over := other.Over("default", "10.0.0.1"); over {
		t.Fatal("a replica that saw no refusal is over")
	}
	// Once the window has freed, the key is no longer over.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, over := l.Over("default", "10.0.0.1"); !over {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still over long after the window")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !l.Allow(ctx, "default", "10.0.0.1", limit).Allowed {
		t.Fatal("refused after the window freed")
	}
}

// A failure budget is spent only by Fail, holds at most N entries however
// many failures there are, and Known recognises remembered members only.
func TestFailureBudget(t *testing.T) {
	rdb := testenv.NewRedis(t, testenv.RedisDBRateLimit)
	l, _ := newLimiter(t, rdb)
	ctx := context.Background()
	limit := config.Limit{N: 3, Window: time.Minute}
	for range 10 {
		if d := l.Failures(ctx, "login_account", "acct", limit); !d.Allowed || d.Remaining != 3 {
			t.Fatalf("peeking spent the budget: %+v", d)
		}
	}
	for i := range 100 {
		l.Fail(ctx, "login_account", "acct", limit)
		d := l.Failures(ctx, "login_account", "acct", limit)
		if wantAllowed := i+1 < 3; d.Allowed != wantAllowed || d.Local {
			t.Fatalf("after %d failures: %+v", i+1, d)
		}
		if !d.Allowed && (d.RetryAfter() < 1 || d.RetryAfter() > 60) {
			t.Fatalf("RetryAfter %d", d.RetryAfter())
		}
	}
	if n := rdb.ZCard(ctx, "gh:rl:login_account:acct").Val(); n != 3 {
		t.Fatalf("100 failures hold %d entries, want 3", n)
	}
	if d := l.Failures(ctx, "login_account", "other", limit); !d.Allowed {
		t.Fatalf("another key's budget is spent: %+v", d)
	}
	if l.Known(ctx, "login_account", "acct", "10.0.0.1") {
		t.Fatal("unknown member is known")
	}
	for i := range 30 {
		l.Remember(ctx, "login_account", "acct", "10.0.1."+string(rune('0'+i%10))+string(rune('0'+i/10)))
	}
	l.Remember(ctx, "login_account", "acct", "10.0.0.1")
	if !l.Known(ctx, "login_account", "acct", "10.0.0.1") || l.Known(ctx, "login_account", "other", "10.0.0.1") {
		t.Fatal("Known does not recognise exactly the remembered member")
	}
	if n := rdb.ZCard(ctx, "gh:known:login_account:acct").Val(); n > 20 {
		t.Fatalf("31 remembered members hold %d entries, want at most 20", n)
	}
}

// Without Redis the budget is kept in the replica's memory.
func TestFailureBudgetFallsBackToMemory(t *testing.T) {
	rdb, err := cache.NewClient("redis://127.0.0.1:1/0")
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	l, m := newLimiter(t, rdb)
	ctx := context.Background()
	limit := config.Limit{N: 2, Window: time.Minute}
	l.Fail(ctx, "login_account", "acct", limit)
	l.Fail(ctx, "login_account", "acct", limit)
	if d := l.Failures(ctx, "login_account", "acct", limit); d.Allowed || !d.Local {
		t.Fatalf("local budget after 2 failures: %+v", d)
	}
	if got := testutil.ToFloat64(m.Fallbacks.WithLabelValues("login_account")); got != 3 {
		t.Fatalf("fallbacks %v, want 3", got)
	}
}

// AllowGated counts a request only while its gate is open, in the window
// Allow uses for the same name and key.
func TestAllowGated(t *testing.T) {
	rdb := testenv.NewRedis(t, testenv.RedisDBRateLimit)
	l, _ := newLimiter(t, rdb)
	ctx := context.Background()
	limit := config.Limit{N: 3, Window: time.Minute}
	gate := ratelimit.Gate{Key: "gh:gate:{k}", Open: "|active"}
	count := func() int64 { return rdb.ZCard(ctx, "gh:rl:charges:{k}").Val() }

	if _, v, counted, err := l.AllowGated(ctx, "charges", "{k}", limit, gate); err != nil || counted || v != "" {
		t.Fatalf("no gate: value %q counted %v err %v; want \"\", false, nil", v, counted, err)
	}
	rdb.Set(ctx, gate.Key, "m|k|sandbox|revoked", time.Minute)
	if _, v, counted, err := l.AllowGated(ctx, "charges", "{k}", limit, gate); err != nil || counted || v != "m|k|sandbox|revoked" {
		t.Fatalf("closed gate: value %q counted %v err %v", v, counted, err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d entries after closed gates, want 0", n)
	}
	rdb.Set(ctx, gate.Key, "m|k|sandbox|active", time.Minute)
	if d := l.Allow(ctx, "charges", "{k}", limit); !d.Allowed || d.Remaining != 2 {
		t.Fatalf("Allow: %+v", d)
	}
	for i, want := range []bool{true, true, false} {
		d, v, counted, err := l.AllowGated(ctx, "charges", "{k}", limit, gate)
		if err != nil || !counted || v != "m|k|sandbox|active" || d.Allowed != want || d.Local {
			t.Fatalf("open gate, request %d: %+v value %q counted %v err %v; want allowed %v", i, d, v, counted, err, want)
		}
		if !want && (d.RetryAfter() < 1 || d.RetryAfter() > 60) {
			t.Fatalf("RetryAfter %d", d.RetryAfter())
		}
	}
	if _, over := l.Over("charges", "{k}"); !over {
		t.Fatal("a gated refusal is not remembered by Over")
	}

	down, _ := newLimiter(t, redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}))
	if _, _, counted, err := down.AllowGated(ctx, "charges", "{k}", limit, gate); err == nil || counted {
		t.Fatalf("Redis down: counted %v err %v; want an error for the caller's fallback", counted, err)
	}
}

// AllowGatedAlso counts a request under the key's limit and, when that
// allows it and the gate's entry is the owner's, under the owner's limit in
// the same script, in the windows Allow uses for the same names and keys.
// Two keys of one owner share its limit; a refusal by the key's limit does
// not count against the owner; a wrong owner counts nothing of it.
func TestAllowGatedAlso(t *testing.T) {
	rdb := testenv.NewRedis(t, testenv.RedisDBRateLimit)
	l, _ := newLimiter(t, rdb)
	ctx := context.Background()
	perKey := config.Limit{N: 2, Window: time.Minute}
	perOwner := config.Limit{N: 3, Window: time.Minute}
	gateA := ratelimit.Gate{Key: "gh:gate:{a}", Open: "|active"}
	gateB := ratelimit.Gate{Key: "gh:gate:{b}", Open: "|active"}
	rdb.Set(ctx, gateA.Key, "mer_1|a|sandbox|active", time.Minute)
	rdb.Set(ctx, gateB.Key, "mer_1|b|sandbox|active", time.Minute)
	also := &ratelimit.Also{Name: "charges_merchant", Key: "mer_1", Limit: perOwner, Prefix: "mer_1|"}
	owner := func() int64 { return rdb.ZCard(ctx, "gh:rl:charges_merchant:mer_1").Val() }

	for i, c := range []struct {
		gate                  ratelimit.Gate
		key                   string
		also                  *ratelimit.Also
		keyAllowed, alsoCount bool
		ownerAllowed          bool
		ownerEntries          int64
	}{
		{gateA, "{a}", also, true, true, true, 1},
		{gateA, "{a}", also, true, true, true, 2},
		{gateA, "{a}", also, false, false, false, 2}, // the key's limit refuses: not counted for the owner
		{gateB, "{b}", &ratelimit.Also{Name: "charges_merchant", Key: "mer_2", Limit: perOwner, Prefix: "mer_2|"}, true, false, false, 2},
		{gateB, "{b}", also, true, true, true, 3},
		{gateB, "{b}", also, false, false, false, 3},
	} {
		g, err := l.AllowGatedAlso(ctx, "charges", c.key, perKey, c.gate, c.also)
		if err != nil || !g.Counted || g.Decision.Allowed != c.keyAllowed || g.AlsoCounted != c.alsoCount ||
			(c.alsoCount && g.Also.Allowed != c.ownerAllowed) {
			t.Fatalf("request %d: %+v err %v; want key allowed %v, owner counted %v allowed %v", i, g, err, c.keyAllowed, c.alsoCount, c.ownerAllowed)
		}
		if n := owner(); n != c.ownerEntries {
			t.Fatalf("request %d: the owner's window holds %d, want %d", i, n, c.ownerEntries)
		}
	}
	// The owner is at its limit: a third key's request is refused by it,
	// and Allow sees the same window.
	gateC := ratelimit.Gate{Key: "gh:gate:{c}", Open: "|active"}
	rdb.Set(ctx, gateC.Key, "mer_1|c|sandbox|active", time.Minute)
	g, err := l.AllowGatedAlso(ctx, "charges", "{c}", perKey, gateC, also)
	if err != nil || !g.Decision.Allowed || !g.AlsoCounted || g.Also.Allowed || g.Also.Remaining != 0 || g.Also.RetryAfter() < 1 {
		t.Fatalf("third key: %+v err %v; want the owner's refusal", g, err)
	}
	if d := l.Allow(ctx, "charges_merchant", "mer_1", perOwner); d.Allowed {
		t.Fatalf("Allow on the owner's window: %+v, want refused", d)
	}
	// A closed gate counts nothing.
	rdb.Set(ctx, gateC.Key, "mer_1|c|sandbox|revoked", time.Minute)
	if g, err := l.AllowGatedAlso(ctx, "charges", "{c}", perKey, gateC, also); err != nil || g.Counted || g.AlsoCounted {
		t.Fatalf("closed gate: %+v err %v", g, err)
	}
	if n := rdb.ZCard(ctx, "gh:rl:charges:{c}").Val(); n != 1 {
		t.Fatalf("the third key's window holds %d, want 1", n)
	}
	// Without Also it is AllowGated.
	if g, err := l.AllowGatedAlso(ctx, "charges", "{d}", perKey, ratelimit.Gate{Key: "gh:gate:{d}", Open: "|active"}, nil); err != nil || g.Counted || g.AlsoCounted {
		t.Fatalf("no gate, no also: %+v err %v", g, err)
	}
}
