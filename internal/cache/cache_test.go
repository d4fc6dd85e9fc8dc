package cache_test

import (
	"context"
	"encoding/hex"
	"reflect"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/cache"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

func TestFillNeverOverwritesARevocation(t *testing.T) {
	rdb := testenv.NewRedis(t, testenv.RedisDBCache)
	c := cache.New(rdb)
	ctx := context.Background()
	digest := apikeys.Digest("sk_test_x")
	active := apikeys.Entry{KeyID: "key_1", MerchantID: "mer_1", Environment: "sandbox"}
	revoked := active
	revoked.Revoked = true

	if err := c.SetKey(ctx, digest, revoked, time.Minute); err != nil {
		t.Fatal(err)
	}
	// A reader that saw the key active before the revoke fills late.
	if err := c.FillKey(ctx, digest, active, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, found, err := c.Key(ctx, digest)
	if err != nil || !found || !reflect.DeepEqual(got, revoked) {
		t.Fatalf("got %+v found=%v err=%v, want the revoked entry", got, found, err)
	}
	// A replica of the release before the hash-tagged names reads
	// gh:key:<hex>: a revoke writes it too, so such a replica refuses the key
	// during a rolling upgrade.
	legacy, err := rdb.Get(ctx, "gh:key:"+hex.EncodeToString(digest)).Result()
	if err != nil || legacy != "mer_1|key_1|sandbox|revoked" {
		t.Fatalf("legacy entry %q (%v), want the revoked entry", legacy, err)
	}

	if err := c.SetSessionState(ctx, "ses_1", "revoked", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.FillSessionState(ctx, "ses_1", "active", time.Minute); err != nil {
		t.Fatal(err)
	}
	if state, found, err := c.SessionState(ctx, "ses_1"); err != nil || !found || state != "revoked" {
		t.Fatalf("session state %q found=%v err=%v, want revoked", state, found, err)
	}
}

func TestEntriesRoundTrip(t *testing.T) {
	rdb := testenv.NewRedis(t, testenv.RedisDBCache)
	c := cache.New(rdb)
	ctx := context.Background()
	for i, e := range []apikeys.Entry{
		{KeyID: "key_1", MerchantID: "mer_1", Environment: "sandbox"},
		{KeyID: "key_2", MerchantID: "mer_2", Environment: "sandbox", Revoked: true},
	} {
		d := apikeys.Digest(string(rune('a' + i)))
		if err := c.FillKey(ctx, d, e, time.Minute); err != nil {
			t.Fatal(err)
		}
		got, found, err := c.Key(ctx, d)
		if err != nil || !found || !reflect.DeepEqual(got, e) {
			t.Errorf("round trip of %+v: got %+v found=%v err=%v", e, got, found, err)
		}
	}
	if _, found, err := c.Key(ctx, apikeys.Digest("never")); found || err != nil {
		t.Fatalf("miss: found=%v err=%v", found, err)
	}
	// An entry of an older release that cached unknown digests reads as a
	// miss, so the caller asks Postgres.
	old := apikeys.Digest("old")
	if err := rdb.Set(ctx, "gh:key:"+apikeys.Tag(old), "|||unknown", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, found, err := c.Key(ctx, old); found || err != nil {
		t.Fatalf("old unknown entry: got %+v found=%v err=%v, want a miss", got, found, err)
	}
}

func TestBreakerAnswersAtOnceWhileDown(t *testing.T) {
	rdb, err := cache.NewClient("redis://127.0.0.1:1/0")
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("ping of a closed port succeeded")
	}
	// Within the open second, calls fail with ErrDown without touching the network.
	for i := 0; i < 100; i++ {
		if err := rdb.Get(ctx, "k").Err(); err != cache.ErrDown {
			t.Fatalf("call %d while down: %v, want ErrDown", i, err)
		}
	}
}
