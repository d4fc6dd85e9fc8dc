package cache_test

import (
	"context"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/authz"
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
	expires := time.Date(2026, 11, 27, 9, 30, 0, 123e6, time.UTC)
	for i, e := range []apikeys.Entry{
		{KeyID: "key_1", MerchantID: "mer_1", Environment: "sandbox"},
		{KeyID: "key_2", MerchantID: "mer_2", Environment: "sandbox", Revoked: true},
		{KeyID: "key_3", MerchantID: "mer_3", Environment: "sandbox", ExpiresAt: expires},
		{KeyID: "key_4", MerchantID: "mer_4", Environment: "sandbox",
			Permissions: authz.Permissions{authz.Charges: authz.Write, authz.Refunds: authz.Read}, ExpiresAt: expires},
		{KeyID: "key_5", MerchantID: "mer_5", Environment: "sandbox", Permissions: authz.Permissions{}, Revoked: true},
	} {
		d := apikeys.Digest(string(rune('a' + i)))
		if err := c.FillKey(ctx, d, e, time.Minute); err != nil {
			t.Fatal(err)
		}
		got, found, err := c.Key(ctx, d)
		if err != nil || !found || !reflect.DeepEqual(got, e) {
			t.Errorf("round trip of %+v: got %+v found=%v err=%v", e, got, found, err)
		}
		// The charge route's fast path decodes what the limiter's gate read;
		// an active entry keeps the gate open, whatever it carries.
		v, _ := rdb.Get(ctx, "gh:key:"+apikeys.Tag(d)).Result()
		if got, ok := c.Decode(v); !ok || !reflect.DeepEqual(got, e) {
			t.Errorf("Decode(%q) = %+v, %v; want %+v", v, got, ok, e)
		}
		if open := strings.HasSuffix(v, c.Gate(d).Open); open == e.Revoked {
			t.Errorf("entry %q: gate open %v for revoked=%v", v, open, e.Revoked)
		}
	}
	// An entry of the release before restricted keys is a secret key
	// without an expiry.
	prev := apikeys.Digest("prev")
	if err := rdb.Set(ctx, "gh:key:"+apikeys.Tag(prev), "mer_9|key_9|sandbox|active", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, found, err := c.Key(ctx, prev); err != nil || !found || got.Permissions != nil || !got.ExpiresAt.IsZero() || got.KeyID != "key_9" || got.Revoked {
		t.Fatalf("entry of the previous release: got %+v found=%v err=%v", got, found, err)
	}
	// A restricted key's legacy entry (for replicas before the hash-tagged
	// names) keeps their 4-field form.
	if err := c.SetKey(ctx, prev, apikeys.Entry{KeyID: "key_9", MerchantID: "mer_9", Environment: "sandbox", Permissions: authz.Permissions{}, Revoked: true}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if legacy, _ := rdb.Get(ctx, "gh:key:"+hex.EncodeToString(prev)).Result(); legacy != "mer_9|key_9|sandbox|revoked" {
		t.Fatalf("legacy entry %q", legacy)
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
