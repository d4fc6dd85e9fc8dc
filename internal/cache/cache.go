// Package cache is the Redis side of authentication: the shared read-through
// caches of session states and API key digests, and the Redis client every
// binary uses. Postgres holds the truth; these entries only save round trips.
package cache

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/ratelimit"
)

// NewClient returns the cache client for a single-server redis:// or
// rediss:// URL; see Dial.
func NewClient(url string) (redis.UniversalClient, error) { return Dial(url, "single") }

// Dial returns the client the caches and rate limits use, for REDIS_URL read
// in REDIS_MODE: "single" (redis://[:password@]host:port/db), "sentinel"
// (redis://[:password@]sentinel:26379?master_name=NAME&addr=sentinel2:26379...)
// or "cluster" (redis://[:password@]node:6379?addr=node2:6379...). Timeouts
// are short: a Redis that does not answer quickly is treated as down, and the
// callers fall back (Postgres for auth, a local limiter for rate limits).
func Dial(url, mode string) (redis.UniversalClient, error) {
	c, err := open(url, mode, func(t *timeouts) {
		t.dial, t.read, t.write = 500*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
		t.maxRetries = 1 // one retry covers a pooled connection that died with a Redis restart
		t.dialerRetries = 1
		t.pool = time.Second
	})
	if err != nil {
		return nil, err
	}
	c.AddHook(&breaker{})
	return c, nil
}

// DialQueue returns the client the job queue uses, for the same URL and mode
// as Dial, with go-redis' default timeouts: the queue's scripts may take
// longer than a cache read, and its callers retry on their own.
func DialQueue(url, mode string) (redis.UniversalClient, error) {
	return open(url, mode, func(*timeouts) {})
}

// timeouts are the options Dial and DialQueue set, whatever the mode.
type timeouts struct {
	dial, read, write, pool   time.Duration
	maxRetries, dialerRetries int
}

func open(url, mode string, set func(*timeouts)) (redis.UniversalClient, error) {
	var t timeouts
	set(&t)
	apply := func(dial, read, write, pool *time.Duration, maxRetries, dialerRetries *int) {
		if t.dial != 0 {
			*dial, *read, *write, *pool = t.dial, t.read, t.write, t.pool
			*maxRetries, *dialerRetries = t.maxRetries, t.dialerRetries
		}
	}
	switch mode {
	case "", "single":
		o, err := redis.ParseURL(url)
		if err != nil {
			return nil, errors.New("cache: REDIS_URL is not a valid redis URL")
		}
		apply(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries, &o.DialerRetries)
		return redis.NewClient(o), nil
	case "sentinel":
		o, err := redis.ParseFailoverURL(url)
		if err != nil || o.MasterName == "" {
			return nil, errors.New("cache: REDIS_URL is not a valid sentinel URL (redis://[:password@]host:26379?master_name=NAME&addr=host2:26379)")
		}
		if o.Password == "" {
			// The URL's credentials are the Redis server's, as in the other
			// modes (go-redis gives them to the sentinels only); the
			// sentinels get them too.
			o.Username, o.Password = o.SentinelUsername, o.SentinelPassword
		}
		apply(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries, &o.DialerRetries)
		return redis.NewFailoverClient(o), nil
	case "cluster":
		o, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, errors.New("cache: REDIS_URL is not a valid cluster URL (redis://[:password@]host:6379?addr=host2:6379)")
		}
		apply(&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.MaxRetries, &o.DialerRetries)
		return redis.NewClusterClient(o), nil
	}
	return nil, fmt.Errorf("cache: REDIS_MODE %q is not single, sentinel or cluster", mode)
}

// ErrDown is returned, without a network round trip, for a new connection
// while Redis is considered down.
var ErrDown = errors.New("cache: redis is down")

// breaker guards dialing. After a failed dial it refuses new connections for a
// second, so that while Redis is unreachable requests pay nothing for trying
// it and the callers go straight to their fallbacks. When the second is over
// one dial probes Redis while the others keep failing fast; its result closes
// the breaker or opens it for another second. Connections already in the pool
// fail on their own (reset or read timeout) and are discarded by go-redis.
type breaker struct {
	downUntil atomic.Int64 // unix nanoseconds; 0 when closed
}

const breakerOpen = time.Second

// allow reports whether a dial may go to Redis.
func (b *breaker) allow() bool {
	until := b.downUntil.Load()
	if until == 0 {
		return true
	}
	now := time.Now().UnixNano()
	if now < until {
		return false
	}
	return b.downUntil.CompareAndSwap(until, now+int64(breakerOpen)) // this dial probes
}

func (b *breaker) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !b.allow() {
			return nil, ErrDown
		}
		conn, err := next(ctx, network, addr)
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				b.downUntil.Store(time.Now().Add(breakerOpen).UnixNano())
			}
			return nil, err
		}
		b.downUntil.Store(0)
		return conn, nil
	}
}

func (b *breaker) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (b *breaker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// SetLogger sends go-redis' own log lines (dial failures while Redis is down)
// to log at debug level: the fallbacks already report an outage once.
func SetLogger(log *slog.Logger) { redis.SetLogger(redisLogger{log}) }

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}

// Cache implements auth.Cache and apikeys.Cache on Redis.
type Cache struct {
	rdb redis.UniversalClient
}

// New returns a Cache on rdb.
func New(rdb redis.UniversalClient) *Cache { return &Cache{rdb: rdb} }

func sessionKey(id string) string { return "gh:sess:" + id }

// SessionState returns the cached state of a session.
func (c *Cache) SessionState(ctx context.Context, id string) (string, bool, error) {
	v, err := c.rdb.Get(ctx, sessionKey(id)).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return v, true, nil
}

// FillSessionState caches state unless an entry exists.
func (c *Cache) FillSessionState(ctx context.Context, id, state string, ttl time.Duration) error {
	return c.rdb.SetNX(ctx, sessionKey(id), state, ttl).Err()
}

// SetSessionState caches state, overwriting any entry.
func (c *Cache) SetSessionState(ctx context.Context, id, state string, ttl time.Duration) error {
	return c.rdb.Set(ctx, sessionKey(id), state, ttl).Err()
}

// keyKey is the Redis key of a key's entry, tagged with apikeys.Tag so that
// the key's rate limits share its slot.
func keyKey(digest []byte) string { return "gh:key:" + apikeys.Tag(digest) }

// Entries are stored as "merchant|key|environment|permissions|expires|state":
// permissions "*" for a secret key, else a restricted key's
// "resource=level,..." (empty when it may do nothing); expires a rolled
// key's expiry in Unix milliseconds, else empty. The state comes last, so the
// rate limiter's gate (which checks the value's end) reads it. Entries of the
// releases before restricted keys, "merchant|key|environment|state", are
// still read: secret keys without an expiry.
func encodeEntry(e apikeys.Entry) string {
	state := stateActive
	if e.Revoked {
		state = "revoked"
	}
	perms := "*"
	if e.Permissions != nil {
		parts := make([]string, 0, len(e.Permissions))
		for _, r := range authz.KeyResources {
			if a := e.Permissions[r]; a > authz.None {
				parts = append(parts, string(r)+"="+a.String())
			}
		}
		perms = strings.Join(parts, ",")
	}
	expires := ""
	if !e.ExpiresAt.IsZero() {
		expires = strconv.FormatInt(e.ExpiresAt.UnixMilli(), 10)
	}
	return e.MerchantID + "|" + e.KeyID + "|" + e.Environment + "|" + perms + "|" + expires + "|" + state
}

// encodeLegacy is e as the releases before restricted keys read it, for
// their name of the entry (legacyKeyKey). They know neither permissions nor
// expiry.
func encodeLegacy(e apikeys.Entry) string {
	state := stateActive
	if e.Revoked {
		state = "revoked"
	}
	return e.MerchantID + "|" + e.KeyID + "|" + e.Environment + "|" + state
}

const stateActive = "active"

// Gate is the gate of a key's per-key rate limits (apikeys.GatedCache): open
// while its entry is an active key.
func (c *Cache) Gate(digest []byte) ratelimit.Gate {
	return ratelimit.Gate{Key: keyKey(digest), Open: "|" + stateActive}
}

// OwnedBy is how the entries of the merchant's keys begin, so that a
// limiter script that reads an entry can tell whose key it is
// (ratelimit.Also).
func (c *Cache) OwnedBy(merchantID string) string { return merchantID + "|" }

// Decode reads an entry from its stored value.
func (c *Cache) Decode(value string) (apikeys.Entry, bool) {
	e, err := decodeEntry(value)
	return e, err == nil
}

func decodeEntry(v string) (apikeys.Entry, error) {
	p := strings.Split(v, "|")
	if len(p) == 4 { // a release before restricted keys: a secret key
		p = []string{p[0], p[1], p[2], "*", "", p[3]}
	}
	if len(p) != 6 {
		return apikeys.Entry{}, fmt.Errorf("cache: malformed key entry")
	}
	e := apikeys.Entry{MerchantID: p[0], KeyID: p[1], Environment: p[2]}
	if p[3] != "*" {
		e.Permissions = authz.Permissions{}
		if p[3] != "" {
			for _, part := range strings.Split(p[3], ",") {
				r, level, _ := strings.Cut(part, "=")
				a, ok := authz.ParseAccess(level)
				if !ok {
					return apikeys.Entry{}, fmt.Errorf("cache: malformed key entry permissions")
				}
				e.Permissions[authz.Resource(r)] = a
			}
		}
	}
	if p[4] != "" {
		ms, err := strconv.ParseInt(p[4], 10, 64)
		if err != nil {
			return apikeys.Entry{}, fmt.Errorf("cache: malformed key entry expiry")
		}
		e.ExpiresAt = time.UnixMilli(ms).UTC()
	}
	switch p[5] {
	case stateActive:
	case "revoked":
		e.Revoked = true
	default:
		return apikeys.Entry{}, fmt.Errorf("cache: malformed key entry state")
	}
	return e, nil
}

// Key returns the cached entry for a secret key digest. A malformed entry is
// reported as a miss so the caller reads Postgres.
func (c *Cache) Key(ctx context.Context, digest []byte) (apikeys.Entry, bool, error) {
	v, err := c.rdb.Get(ctx, keyKey(digest)).Result()
	if errors.Is(err, redis.Nil) {
		return apikeys.Entry{}, false, nil
	}
	if err != nil {
		return apikeys.Entry{}, false, err
	}
	e, err := decodeEntry(v)
	if err != nil {
		return apikeys.Entry{}, false, nil
	}
	return e, true, nil
}

// FillKey caches e unless an entry exists.
func (c *Cache) FillKey(ctx context.Context, digest []byte, e apikeys.Entry, ttl time.Duration) error {
	return c.rdb.SetNX(ctx, keyKey(digest), encodeEntry(e), ttl).Err()
}

// SetKey caches e, overwriting any entry. It also writes the entry under the
// name releases before the hash-tagged one read (gh:key:<hex>), so that during
// a rolling upgrade a replica of the older release refuses a key revoked
// through a newer one at once; drop it once no such replica can run.
func (c *Cache) SetKey(ctx context.Context, digest []byte, e apikeys.Entry, ttl time.Duration) error {
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, keyKey(digest), encodeEntry(e), ttl)
		p.Set(ctx, legacyKeyKey(digest), encodeLegacy(e), ttl)
		return nil
	})
	return err
}

// legacyKeyKey is keyKey before it carried a hash tag.
func legacyKeyKey(digest []byte) string { return "gh:key:" + hex.EncodeToString(digest) }
