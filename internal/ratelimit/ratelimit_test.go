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
	limit := config.Limit{N: 2, Window: 1500 * time.Millisecond}
	ctx := context.Background()
	first := l.Allow(ctx, "t", "k", limit)
	time.Sleep(700 * time.Millisecond)
	second := l.Allow(ctx, "t", "k", limit)
	third := l.Allow(ctx, "t", "k", limit)
	if !first.Allowed || !second.Allowed || third.Allowed || third.Remaining != 0 {
		t.Fatalf("decisions %+v %+v %+v", first, second, third)
	}
	if third.Reset <= 0 || third.Reset > 800*time.Millisecond+100*time.Millisecond {
		t.Fatalf("Reset %v: want about 0.8 s (until the first request leaves)", third.Reset)
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
