package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// redisDeploy is the Redis a stack runs on, in one of the three modes the
// binaries support (REDIS_MODE), built from real redis-server processes on
// loopback:
//
//   - single: one server;
//   - cluster: three primaries holding the 16,384 slots between them;
//   - sentinel: a primary, its replica and three sentinels watching them.
type redisDeploy struct {
	mode      string
	nodes     []*harness.RedisServer // the data nodes: single, the primaries, or the primary then its replica
	sentinels []*harness.RedisServer
	// client reaches the data as the binaries do: one server, the cluster
	// (routing by slot) or the sentinels' current primary.
	client redis.UniversalClient
}

// sentinelMaster is the name the sentinels monitor the primary under.
const sentinelMaster = "gatehouse"

// redisModes holds the Redis mode registered for a root test's stacks.
var redisModes sync.Map // root test name -> mode

// runInRedisMode runs fn as the subtest name of t with every stack it starts
// on Redis in mode: the end-to-end suite's own tests run again, unchanged,
// on a cluster or behind sentinels.
func runInRedisMode(t *testing.T, mode, name string, fn func(*testing.T)) {
	t.Helper()
	root, _, _ := strings.Cut(t.Name(), "/")
	if prev, loaded := redisModes.LoadOrStore(root, mode); loaded && prev != mode {
		t.Fatalf("%s already runs its stacks in Redis mode %v", root, prev)
	}
	t.Run(name, fn)
}

// redisModeOf is the Redis mode registered for t's root test, or single.
func redisModeOf(t *testing.T) string {
	root, _, _ := strings.Cut(t.Name(), "/")
	if m, ok := redisModes.Load(root); ok {
		return m.(string)
	}
	return "single"
}

// startRedisDeploy starts Redis in mode with the redis-server at path; the
// test's cleanup stops it.
func startRedisDeploy(t *testing.T, path, mode string) *redisDeploy {
	t.Helper()
	d := &redisDeploy{mode: mode}
	switch mode {
	case "single":
		d.nodes = []*harness.RedisServer{testenv.StartRedis(t, harness.RedisConfig{Path: path})}
		d.client = d.nodes[0].Client
	case "cluster":
		d.startCluster(t, path, 3)
	case "sentinel":
		d.startSentinel(t, path)
	default:
		t.Fatalf("unknown Redis mode %q", mode)
	}
	return d
}

// url is REDIS_URL in the deploy's mode (REDIS_MODE): the first address in
// the host, every further one as an addr parameter.
func (d *redisDeploy) url() string {
	switch d.mode {
	case "cluster":
		return "redis://" + d.nodes[0].Addr() + addrParams(d.nodes[1:], "?")
	case "sentinel":
		return "redis://" + d.sentinels[0].Addr() + "?master_name=" + sentinelMaster + addrParams(d.sentinels[1:], "&")
	}
	return d.nodes[0].URL()
}

func addrParams(servers []*harness.RedisServer, sep string) string {
	var b strings.Builder
	for _, s := range servers {
		b.WriteString(sep + "addr=" + s.Addr())
		sep = "&"
	}
	return b.String()
}

// down reports whether the data nodes are stopped.
func (d *redisDeploy) down() bool { return !d.nodes[0].Running() }

// logs is everything the Redis processes wrote.
func (d *redisDeploy) logs() string {
	var b strings.Builder
	for _, s := range append(append([]*harness.RedisServer(nil), d.nodes...), d.sentinels...) {
		b.WriteString(s.Out.Tail(1 << 62))
	}
	return b.String()
}

// stop kills every data node (SIGKILL, like a crash); the sentinels stay.
func (d *redisDeploy) stop(t *testing.T) {
	t.Helper()
	for _, n := range d.nodes {
		if err := n.Stop(); err != nil {
			t.Error(err)
		}
	}
}

// start starts the data nodes again and waits until the deploy serves:
// every slot covered, or the sentinels' primary answering.
func (d *redisDeploy) start(t *testing.T) {
	t.Helper()
	for _, n := range d.nodes {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	switch d.mode {
	case "cluster":
		d.waitClusterOK(t, 30*time.Second)
	case "sentinel":
		d.waitPrimary(t, 30*time.Second)
	}
}

// primaries are clients of the data nodes that hold the data: every
// primary of a cluster, the sentinels' current primary, or the one server.
// Reading each of them reads every key once.
func (d *redisDeploy) primaries(t *testing.T) []*redis.Client {
	t.Helper()
	if d.mode != "sentinel" {
		return clientsOf(d.nodes)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addr, err := d.sentinelPrimary(ctx)
	for _, n := range d.nodes {
		if err == nil && n.Addr() == addr {
			return []*redis.Client{n.Client}
		}
	}
	t.Fatalf("no Redis data node is the sentinels' primary (%q, %v)", addr, err)
	return nil
}

func clientsOf(servers []*harness.RedisServer) []*redis.Client {
	out := make([]*redis.Client, len(servers))
	for i, s := range servers {
		out[i] = s.Client
	}
	return out
}

// inspector is an asynq inspector of the stack's queues, in its Redis mode.
// Closing it leaves the deploy's client open.
func (d *redisDeploy) inspector() *asynq.Inspector {
	return asynq.NewInspectorFromRedisClient(d.client)
}

// startCluster starts n primaries with cluster mode on and joins them with
// `redis-cli --cluster create`, which spreads the slots over them.
func (d *redisDeploy) startCluster(t *testing.T, path string, n int) {
	t.Helper()
	cli := redisCLIPath(t)
	d.mode = "cluster"
	for range n {
		d.nodes = append(d.nodes, testenv.StartRedis(t, harness.RedisConfig{Path: path, ClusterBus: true, Args: []string{"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
			"--cluster-require-full-coverage", "yes"}}))
	}
	args := []string{"--cluster", "create"}
	for _, s := range d.nodes {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	addrs := make([]string, n)
	for i, s := range d.nodes {
		addrs[i] = s.Addr()
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DialTimeout: 250 * time.Millisecond, MaxRetries: 2})
	t.Cleanup(func() { _ = c.Close() })
	d.client = c
	d.waitClusterOK(t, 30*time.Second)
}

// waitClusterOK waits until every node says cluster_state:ok.
func (d *redisDeploy) waitClusterOK(t *testing.T, within time.Duration) {
	t.Helper()
	within = patience(within)
	deadline := time.Now().Add(within)
	for _, s := range d.nodes {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := s.Client.ClusterInfo(ctx).Result()
			cancel()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Redis cluster node %s not ok after %s: %v %s", s.Addr(), within, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The client learns the slots again: a restart may have moved nothing,
	// but its connections are gone.
	if c, ok := d.client.(*redis.ClusterClient); ok {
		c.ReloadState(context.Background())
	}
}

// startSentinel starts a primary, a replica of it and three sentinels that
// monitor it with a quorum of two and give it up after a second of silence.
func (d *redisDeploy) startSentinel(t *testing.T, path string) {
	t.Helper()
	primary := testenv.StartRedis(t, harness.RedisConfig{Path: path})
	replica := testenv.StartRedis(t, harness.RedisConfig{Path: path, Args: []string{"--replicaof", "127.0.0.1", fmt.Sprint(primary.Port)}})
	d.nodes = []*harness.RedisServer{primary, replica}
	for range 3 {
		d.sentinels = append(d.sentinels, testenv.StartSentinel(t, harness.SentinelConfig{Path: path, Master: sentinelMaster, Quorum: 2,
			Lines: []string{
				"sentinel down-after-milliseconds " + sentinelMaster + " 1000",
				"sentinel failover-timeout " + sentinelMaster + " 10000",
				"sentinel parallel-syncs " + sentinelMaster + " 1",
			}}, primary))
	}
	addrs := make([]string, len(d.sentinels))
	for i, s := range d.sentinels {
		addrs[i] = s.Addr()
	}
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sentinelMaster, SentinelAddrs: addrs,
		DialTimeout: 250 * time.Millisecond, MaxRetries: 2})
	t.Cleanup(func() { _ = c.Close() })
	d.client = c
	d.waitPrimary(t, 30*time.Second)
	// Before any fault: the replica is in sync and every sentinel knows the
	// replica and the two other sentinels, so a failover can be agreed.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := strings.Contains(replica.Client.Info(context.Background(), "replication").Val(), "master_link_status:up")
		for _, s := range d.sentinels {
			m, err := s.Client.Do(context.Background(), "SENTINEL", "MASTER", sentinelMaster).Result()
			ready = ready && err == nil && sentinelField(m, "num-other-sentinels") == "2" && sentinelField(m, "num-slaves") == "1"
		}
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinels not ready after 30s (replica in sync, two other sentinels, one replica each)")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sentinelField reads a field of a SENTINEL MASTER answer, which comes as a
// flat list or, over RESP3, a map.
func sentinelField(m any, name string) string {
	switch v := m.(type) {
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			if fmt.Sprint(v[i]) == name {
				return fmt.Sprint(v[i+1])
			}
		}
	case map[any]any:
		if x, ok := v[name]; ok {
			return fmt.Sprint(x)
		}
	}
	return ""
}

// sentinelPrimary is the address the sentinels give for the primary now.
func (d *redisDeploy) sentinelPrimary(ctx context.Context) (string, error) {
	for _, s := range d.sentinels {
		a, err := s.Client.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinelMaster).StringSlice()
		if err == nil && len(a) == 2 {
			return a[0] + ":" + a[1], nil
		}
	}
	return "", fmt.Errorf("no sentinel names a primary for %s", sentinelMaster)
}

// waitPrimary waits until the primary the sentinels name answers writes.
func (d *redisDeploy) waitPrimary(t *testing.T, within time.Duration) {
	t.Helper()
	within = patience(within)
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := d.client.Set(ctx, "gh:test:primary", "1", time.Minute).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no writable Redis primary behind the sentinels after %s: %v", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// redisCLIPath finds redis-cli, which creates a cluster.
func redisCLIPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("redis-cli")
	if err != nil {
		testenv.Missing(t, "redis-cli is not on PATH (Debian package redis-tools): %v", err)
	}
	return path
}

// entries reads every key of the deploy's data with its values, from each
// primary.
func (d *redisDeploy) entries(t *testing.T) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string][]string{}
	for _, c := range d.primaries(t) {
		iter := c.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			if _, vals, err := redisValues(ctx, c, k); err == nil { // a key may expire between SCAN and the read
				out[k] = vals
			}
		}
		if err := iter.Err(); err != nil {
			t.Fatalf("redis SCAN on %s: %v", c.Options().Addr, err)
		}
	}
	return out
}

// flushAll empties every primary.
func (d *redisDeploy) flushAll(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range d.primaries(t) {
		if err := c.FlushAll(ctx).Err(); err != nil {
			t.Fatalf("FLUSHALL on %s: %v", c.Options().Addr, err)
		}
	}
}

// redisValues reads key k's type and values, whatever the type: a hash as
// field, value pairs, a sorted set as "member score".
func redisValues(ctx context.Context, c *redis.Client, k string) (string, []string, error) {
	typ, err := c.Type(ctx, k).Result()
	if err != nil {
		return "", nil, err
	}
	var vals []string
	switch typ {
	case "string":
		v, _ := c.Get(ctx, k).Result()
		vals = []string{v}
	case "hash":
		m, _ := c.HGetAll(ctx, k).Result()
		for f, v := range m {
			vals = append(vals, f, v)
		}
	case "list":
		vals, _ = c.LRange(ctx, k, 0, -1).Result()
	case "set":
		vals, _ = c.SMembers(ctx, k).Result()
	case "zset":
		zs, _ := c.ZRangeWithScores(ctx, k, 0, -1).Result()
		for _, z := range zs {
			vals = append(vals, fmt.Sprint(z.Member)+" "+strconv.FormatFloat(z.Score, 'f', -1, 64))
		}
	case "stream":
		xs, _ := c.XRange(ctx, k, "-", "+").Result()
		for _, x := range xs {
			vals = append(vals, x.ID+" "+fmt.Sprint(x.Values))
		}
	default:
		v, _ := c.Dump(ctx, k).Result()
		vals = []string{v}
	}
	return typ, vals, nil
}
