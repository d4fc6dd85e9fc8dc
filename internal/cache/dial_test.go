package cache_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/cache"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// dialers are the two constructors under test, with the read timeout each
// one sets (0: go-redis' own default).
var dialers = []struct {
	name        string
	dial        func(url, mode string) (redis.UniversalClient, error)
	readTimeout time.Duration
}{
	{"Dial", cache.Dial, 500 * time.Millisecond},
	{"DialQueue", cache.DialQueue, 0},
}

// orDefault is want, or go-redis' default read timeout when want is 0.
func orDefault(t *testing.T, want time.Duration) time.Duration {
	t.Helper()
	if want != 0 {
		return want
	}
	c := redis.NewClient(&redis.Options{})
	defer c.Close()
	return c.Options().ReadTimeout
}

// setGet writes and reads back a key through c.
func setGet(t *testing.T, c redis.UniversalClient, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := c.Set(ctx, key, "v-"+key, time.Minute).Err(); err != nil {
		t.Fatalf("SET %s: %v", key, err)
	}
	got, err := c.Get(ctx, key).Result()
	if err != nil || got != "v-"+key {
		t.Fatalf("GET %s: %q, %v; want %q", key, got, err, "v-"+key)
	}
}

func TestDialSingle(t *testing.T) {
	testenv.NewRedis(t, testenv.RedisDBCache) // skips or fails without Redis; flushes the DB
	url := testenv.RedisURLFor(testenv.RedisDBCache)
	for _, d := range dialers {
		for _, mode := range []string{"single", ""} {
			t.Run(d.name+" mode "+strconv.Quote(mode), func(t *testing.T) {
				c, err := d.dial(url, mode)
				if err != nil {
					t.Fatalf("%s(%s, %q): %v", d.name, url, mode, err)
				}
				defer c.Close()
				client, ok := c.(*redis.Client)
				if !ok {
					t.Fatalf("%s single: a %T, want a *redis.Client", d.name, c)
				}
				o, wantRead := client.Options(), orDefault(t, d.readTimeout)
				if o.DB != testenv.RedisDBCache || o.ReadTimeout != wantRead {
					t.Errorf("options: DB %d, read timeout %s; want %d, %s", o.DB, o.ReadTimeout, testenv.RedisDBCache, wantRead)
				}
				setGet(t, c, "gh:test:dial:"+d.name)
			})
		}
	}
}

// TestDialCluster: a cluster URL gives a cluster client over every seed node
// and the password, with the dialer's timeouts; no cluster is contacted.
func TestDialCluster(t *testing.T) {
	const url = "redis://:clusterpw@10.0.0.1:6379?addr=10.0.0.2:6379&addr=10.0.0.3:6380"
	for _, d := range dialers {
		t.Run(d.name, func(t *testing.T) {
			c, err := d.dial(url, "cluster")
			if err != nil {
				t.Fatalf("%s cluster: %v", d.name, err)
			}
			defer c.Close()
			cc, ok := c.(*redis.ClusterClient)
			if !ok {
				t.Fatalf("%s cluster: a %T, want a *redis.ClusterClient", d.name, c)
			}
			o, wantRead := cc.Options(), orDefault(t, d.readTimeout)
			if got, want := strings.Join(o.Addrs, ","), "10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6380"; got != want {
				t.Errorf("seed nodes %s, want %s", got, want)
			}
			if o.Password != "clusterpw" || o.ReadTimeout != wantRead {
				t.Errorf("password %q, read timeout %s; want clusterpw, %s", o.Password, o.ReadTimeout, wantRead)
			}
		})
	}
}

// TestDialRefusesBadURLs: a URL the mode cannot read, a sentinel URL without
// master_name and an unknown mode are errors that never show the password.
func TestDialRefusesBadURLs(t *testing.T) {
	const pw = "hunter2secretpw"
	cases := []struct {
		name, url, mode string
	}{
		{"single: not redis://", "http://:" + pw + "@127.0.0.1:6379/0", "single"},
		{"single: bad DB number", "redis://:" + pw + "@127.0.0.1:6379/zero", "single"},
		{"single: bad escape", "redis://:" + pw + "%zz@127.0.0.1:6379/0", "single"},
		{"single: unknown option", "redis://:" + pw + "@127.0.0.1:6379/0?bogus=1", "single"},
		{"sentinel: no master_name", "redis://:" + pw + "@127.0.0.1:26379", "sentinel"},
		{"sentinel: empty master_name", "redis://:" + pw + "@127.0.0.1:26379?master_name=", "sentinel"},
		{"sentinel: not redis://", "http://:" + pw + "@127.0.0.1:26379?master_name=gh", "sentinel"},
		{"sentinel: bad DB number", "redis://:" + pw + "@127.0.0.1:26379/zero?master_name=gh", "sentinel"},
		{"sentinel: bad escape", "redis://:" + pw + "%zz@127.0.0.1:26379?master_name=gh", "sentinel"},
		{"sentinel: bad addr", "redis://:" + pw + "@127.0.0.1:26379?master_name=gh&addr=nohostport", "sentinel"},
		{"cluster: not redis://", "http://:" + pw + "@127.0.0.1:6379", "cluster"},
		{"cluster: bad escape", "redis://:" + pw + "%zz@127.0.0.1:6379", "cluster"},
		{"cluster: unknown option", "redis://:" + pw + "@127.0.0.1:6379?bogus=1", "cluster"},
		{"unknown mode", "redis://:" + pw + "@127.0.0.1:6379/0", "ring"},
		{"mode in capitals", "redis://:" + pw + "@127.0.0.1:6379/0", "SINGLE"},
	}
	for _, d := range dialers {
		for _, c := range cases {
			t.Run(d.name+" "+c.name, func(t *testing.T) {
				client, err := d.dial(c.url, c.mode)
				if err == nil {
					client.Close()
					t.Fatalf("%s(%q, %q): no error", d.name, c.url, c.mode)
				}
				if strings.Contains(err.Error(), pw) {
					t.Errorf("error shows the password: %v", err)
				}
				if !strings.HasPrefix(err.Error(), "cache: ") {
					t.Errorf("error %q does not say where it comes from", err)
				}
			})
		}
	}
}

// sentinelSetup is a master and one sentinel monitoring it as "gh".
type sentinelSetup struct {
	master, sentinel *harness.RedisServer
}

// startSentinel starts a redis-server on a free loopback port and a sentinel
// monitoring it, and waits (at most 8 s) until the sentinel names the
// master. password, when set, protects both the master and the sentinel.
func startSentinel(t *testing.T, password string) sentinelSetup {
	t.Helper()
	master := testenv.StartRedis(t, harness.RedisConfig{Password: password})
	sentinel := testenv.StartSentinel(t, harness.SentinelConfig{Master: "gh", Quorum: 1,
		Lines: []string{"sentinel resolve-hostnames no"}}, master)
	testenv.WaitReady(t, "the sentinel naming master gh", sentinel.Process(), 8*time.Second, 50*time.Millisecond, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		defer cancel()
		addr, err := sentinel.Client.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "gh").StringSlice()
		if err != nil {
			return err
		}
		if len(addr) != 2 || addr[0] != "127.0.0.1" || addr[1] != strconv.Itoa(master.Port) {
			return fmt.Errorf("it names %v", addr)
		}
		return master.Client.Ping(ctx).Err()
	})
	return sentinelSetup{master: master, sentinel: sentinel}
}

// TestDialSentinel: in sentinel mode the client asks the sentinel for the
// master and reads and writes there.
func TestDialSentinel(t *testing.T) {
	s := startSentinel(t, "")
	url := fmt.Sprintf("redis://%s?master_name=gh", s.sentinel.Addr())
	direct := redis.NewClient(&redis.Options{Addr: s.master.Addr()})
	defer direct.Close()
	for _, d := range dialers {
		t.Run(d.name, func(t *testing.T) {
			c, err := d.dial(url, "sentinel")
			if err != nil {
				t.Fatalf("%s(%s, sentinel): %v", d.name, url, err)
			}
			defer c.Close()
			key := "gh:test:sentinel:" + d.name
			setGet(t, c, key)
			// The write went to the master the sentinel named.
			if got, err := direct.Get(context.Background(), key).Result(); err != nil || got != "v-"+key {
				t.Errorf("on the master: %q, %v; want %q", got, err, "v-"+key)
			}
		})
	}
}

// TestDialSentinelPassword: with the URL form of docs/deploy.md and the
// deploy overlays, redis://:password@sentinel:26379?master_name=NAME, the
// password reaches the master (the Redis password, as in the other modes),
// not only the sentinels.
func TestDialSentinelPassword(t *testing.T) {
	const pw = "s3cret-sentinel-pw"
	s := startSentinel(t, pw)
	url := fmt.Sprintf("redis://:%s@%s?master_name=gh", pw, s.sentinel.Addr())
	for _, d := range dialers {
		t.Run(d.name, func(t *testing.T) {
			c, err := d.dial(url, "sentinel")
			if err != nil {
				t.Fatalf("%s(sentinel): %v", d.name, err)
			}
			defer c.Close()
			setGet(t, c, "gh:test:sentinel-auth:"+d.name)
		})
	}
}
