package e2e

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/cache"
	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/ratelimit"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// clusterSuite is the end-to-end suite F7 runs again on a Redis Cluster: at
// smoke scale the whole journey of TestEndToEnd (with its Redis flush and
// outage), at full scale every end-to-end test that does not need a single
// server of its own.
func clusterSuite() []namedTest {
	suite := []namedTest{{"EndToEnd", TestEndToEnd}}
	if chaosFull() {
		suite = append(suite,
			namedTest{"ChargesEndToEnd", TestChargesEndToEnd},
			namedTest{"WebhooksEndToEnd", TestWebhooksEndToEnd},
			namedTest{"WebhooksWorkerKilled", TestWebhooksWorkerKilled},
			namedTest{"IdempotentCreationAcrossReplicas", TestIdempotentCreationAcrossReplicas},
			namedTest{"EventStreamEndToEnd", TestEventStreamEndToEnd},
			namedTest{"WebhookEndpointHealth", TestWebhookEndpointHealth},
			namedTest{"CardTokenThroughEveryProvider", TestCardTokenThroughEveryProvider},
			namedTest{"LookupsAfterTheIdempotencyWindow", TestLookupsAfterTheIdempotencyWindow},
			namedTest{"CLIEndToEnd", TestCLIEndToEnd},
			namedTest{"AuthFlood", TestAuthFlood},
			namedTest{"ChaosWorkerKilled", TestChaosWorkerKilled},
			namedTest{"ChaosRedisDown", TestChaosRedisDown},
		)
	}
	return suite
}

type namedTest struct {
	name string
	fn   func(*testing.T)
}

// TestChaosRedisCluster is F7: Redis Cluster with three real primaries.
// Every multi-key script runs on it (the keys of one call share a hash tag,
// so one slot), and the end-to-end suite passes with REDIS_MODE=cluster: the
// limiter scripts, the caches and asynq's queues spread over the slots.
func TestChaosRedisCluster(t *testing.T) {
	chaosParallel(t)
	redisPath := testenv.RedisServerPath(t)
	t.Run("scripts_are_slot_safe", func(t *testing.T) {
		d := startRedisDeploy(t, redisPath, "cluster")
		checkScriptsOnCluster(t, d)
	})
	start := time.Now()
	for _, s := range clusterSuite() {
		runInRedisMode(t, "cluster", s.name, s.fn)
	}
	t.Logf("F7 figures: %d end-to-end tests on a three-primary Redis Cluster in %s", len(clusterSuite()), time.Since(start).Round(time.Millisecond))
}

// checkScriptsOnCluster runs every Lua script of the limiter, with the
// keys the API gives it, through the binaries' own cluster client, and
// shows that a script whose keys lie in two slots would be refused, so a
// key without its hash tag cannot pass unnoticed.
func checkScriptsOnCluster(t *testing.T, d *redisDeploy) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb, err := cache.Dial(d.url(), "cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	metrics := ratelimit.NewMetrics(prometheus.NewRegistry())
	lim := ratelimit.New(rdb, metrics, slog.Default())
	keys := cache.New(rdb)
	limit := config.Limit{N: 5, Window: time.Minute}

	// Two keys whose tags fall in different slots.
	a, b := apikeys.Digest("sk_test_cluster_a"), apikeys.Digest("sk_test_cluster_b")
	for i := 0; keySlot(t, d, apikeys.Tag(a)) == keySlot(t, d, apikeys.Tag(b)); i++ {
		b = apikeys.Digest("sk_test_cluster_b" + strings.Repeat("x", i))
	}
	if err := keys.SetKey(ctx, a, apikeys.Entry{KeyID: "key_a", MerchantID: "mer_a", Environment: apikeys.Sandbox}, time.Minute); err != nil {
		t.Fatalf("SetKey on the cluster: %v", err)
	}
	if e, ok, err := keys.Key(ctx, a); err != nil || !ok || e.KeyID != "key_a" {
		t.Fatalf("Key on the cluster: %+v %t %v", e, ok, err)
	}

	// The charge route's gated window: the key's cache entry and its limit.
	for i := range limit.N + 1 {
		dec, v, counted, err := lim.AllowGated(ctx, "charges", apikeys.Tag(a), limit, keys.Gate(a))
		if err != nil || !counted || v == "" {
			t.Fatalf("AllowGated %d on the cluster: counted %t, value %q, err %v", i, counted, v, err)
		}
		if want := i < limit.N; dec.Allowed != want {
			t.Fatalf("AllowGated %d: allowed %t, want %t", i, dec.Allowed, want)
		}
	}
	// The same script with a gate in another slot is refused by the cluster.
	if _, _, _, err := lim.AllowGated(ctx, "charges", apikeys.Tag(b), limit, keys.Gate(a)); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("AllowGated with keys in two slots: %v, want a CROSSSLOT error", err)
	}
	// The one-key scripts: the sliding window, the failure budget, the known addresses.
	if dec := lim.Allow(ctx, "login", "127.0.0.1", limit); !dec.Allowed {
		t.Fatalf("Allow on the cluster: %+v", dec)
	}
	lim.Fail(ctx, "login_account", "merchant@example.com", limit)
	if dec := lim.Failures(ctx, "login_account", "merchant@example.com", limit); dec.Remaining != limit.N-1 {
		t.Fatalf("Failures on the cluster after one Fail: %+v", dec)
	}
	lim.Remember(ctx, "login_account", "merchant@example.com", "127.0.0.1")
	if !lim.Known(ctx, "login_account", "merchant@example.com", "127.0.0.1") || lim.Known(ctx, "login_account", "merchant@example.com", "127.0.0.2") {
		t.Fatalf("Known on the cluster: the remembered address is not known, or another one is")
	}
	// None of them fell back to the replica's memory.
	for _, name := range []string{"charges", "login", "login_account"} {
		if got := testutil.ToFloat64(metrics.Fallbacks.WithLabelValues(name)); got != 0 {
			t.Fatalf("%v fallbacks to memory for limit %s on the cluster, want 0", got, name)
		}
	}
}

// keySlot is the cluster slot of key.
func keySlot(t *testing.T, d *redisDeploy, key string) int64 {
	t.Helper()
	n, err := d.client.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestChaosRedisSentinel is F6: the stack runs on a Redis primary with a
// replica and three sentinels (REDIS_MODE=sentinel). Under charge and
// delivery load the primary is killed with SIGKILL; the sentinels promote
// the replica and the binaries follow them to it. No event is lost (the
// outbox enqueues again whatever the dead primary held and had not passed
// to its replica), no charge is made twice, and the times to promotion and
// to recovery (a charge made after the kill captured by the worker) are
// reported. The killed server comes back and the sentinels turn it into a
// replica of the new primary.
func TestChaosRedisSentinel(t *testing.T) {
	chaosParallel(t)
	var (
		senders = 4
		pace    = chaosScale(80*time.Millisecond, 20*time.Millisecond)
		before  = chaosScale(time.Second, 5*time.Second)
		after   = chaosScale(3*time.Second, 15*time.Second)
	)
	st, m := chaosStack(t, "127.0.0.70", stackOptions{redisMode: "sentinel"})
	rcv := newReceiver(t, "f6", always(http.StatusOK))
	m.endpoint(t, rcv.url(), "charge.created", "charge.captured")

	load := startChaosLoad(t, st, m, "f6", senders, pace)
	time.Sleep(before)
	primary, replica := st.redis.nodes[0], st.redis.nodes[1]
	if err := primary.Stop(); err != nil {
		t.Error(err)
	}
	killed := time.Now()
	var promoted time.Duration
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addr, err := st.redis.sentinelPrimary(ctx)
		cancel()
		if err == nil && addr == replica.Addr() {
			promoted = time.Since(killed)
			break
		}
		if time.Since(killed) > 60*time.Second {
			t.Fatalf("the sentinels did not promote the replica within 60s (they name %q, %v)", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(after)
	// It comes back as an empty primary; the sentinels make it a replica.
	if err := primary.Start(); err != nil {
		t.Fatal(err)
	}
	shots := load.end()

	created, unavailable, other, _ := tally(t, shots)
	drained, lost := waitDrained(t, st, m, []*receiver{rcv}, killed, 120*time.Second)

	// Recovery: the first charge made after the kill that the worker captured.
	var recovered time.Duration
	ctx, cancel := dbCtx()
	var first *time.Time
	err := st.db.Pool.QueryRow(ctx, `SELECT min(updated_at) FROM charges WHERE merchant_id = $1 AND status = 'captured' AND created_at > $2`,
		m.id, killed).Scan(&first)
	cancel()
	if err != nil || first == nil {
		t.Errorf("no charge made after the kill was captured: %v", err)
	} else {
		recovered = first.Sub(killed)
	}

	// One charge per Idempotency-Key, each authorized once by the sandbox.
	rows := byTag(chargeRows(t, st.db, m.id))
	double := chargesMatchAnswers(t, rows, shots)
	for tag, list := range rows {
		for _, r := range list {
			if !r.Booked {
				t.Errorf("charge %s (%s) has no sandbox authorization", r.ID, tag)
			}
		}
	}
	if n := orphanAuthorizations(t, st.db); n != 0 {
		double += int(n)
		t.Errorf("%d sandbox authorizations for no charge", n)
	}
	if created == 0 {
		t.Errorf("no charge was created; the test did not exercise the stack")
	}
	// The old primary rejoined as a replica of the new one.
	deadline := time.Now().Add(waitFloor)
	for !strings.Contains(primary.Client.Info(context.Background(), "replication").Val(), "master_port:"+strconv.Itoa(replica.Port)) {
		if time.Now().After(deadline) {
			t.Errorf("the old primary did not become a replica of the promoted one within %s", waitFloor)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("F6 figures: charges %d (201 %d, 503 %d, other %d), primary killed after %s of load; promoted by the sentinels %s after the kill; recovered (a charge made after the kill captured) %s after the kill; events lost %d, double charges %d; backlog drained %s after the kill",
		len(shots), created, unavailable, other, before, promoted.Round(time.Millisecond), recovered.Round(time.Millisecond), lost, double, drained.Round(time.Millisecond))
}
