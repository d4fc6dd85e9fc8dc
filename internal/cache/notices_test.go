package cache_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/cache"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// TestRoutingNoticesAcrossReplicas: two replicas' routing caches over one
// Postgres and one Redis (clients dialled as the binaries dial them, with
// their short read timeouts). A cached snapshot costs no Postgres read; a
// routing change through one replica reaches the other's charge path at
// once, long before the snapshot's TTL, even after the subscription sat
// idle past the client's read timeout.
func TestRoutingNoticesAcrossReplicas(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := merchants.Merchant{ID: ids.New("mer"), Email: "notices@example.com", Name: "n", PasswordHash: "h", CreatedAt: time.Now().UTC()}
	if err := s.CreateMerchant(ctx, m); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	channel := "test:routing:" + m.ID
	var loads, subscribed [2]atomic.Int64
	var dirs [2]*connectors.Directory
	for i := range dirs {
		rdb, err := cache.NewClient(testenv.RedisURLFor(testenv.RedisDBCache))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rdb.Close() })
		n := cache.NewNotices(rdb, channel)
		dirs[i] = connectors.NewDirectory(s, n, []string{"sandbox"}, "sandbox", time.Hour, time.Now).OnLoad(func() { loads[i].Add(1) })
		forgetAll := func() { dirs[i].ForgetAll(); subscribed[i].Add(1) }
		go n.Listen(ctx, dirs[i].Forget, forgetAll, log)
	}
	// Wait until each listener has taken its subscription's confirmation
	// (and so dropped everything once): Redis counts a subscriber before
	// the client reads the confirmation, so a snapshot cached between the
	// two would be dropped by it.
	deadline := time.Now().Add(30 * time.Second)
	for subscribed[0].Load() == 0 || subscribed[1].Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("replicas not subscribed after 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}

	for range 3 {
		snap, err := dirs[1].Snapshot(ctx, m.ID)
		if err != nil || snap.Routing != nil || len(snap.Connectors) != 1 {
			t.Fatalf("snapshot %+v %v", snap, err)
		}
	}
	if n := loads[1].Load(); n != 1 {
		t.Fatalf("%d Postgres reads for three snapshots, want 1", n)
	}
	if n := subscribed[1].Load(); n != 1 {
		t.Fatalf("the subscription was established %d times, want once", n)
	}
	time.Sleep(1500 * time.Millisecond) // idle past the 500 ms read timeout

	keys, err := keyring.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	svc := connectors.NewService(s, keys, dirs[0], []string{"sandbox"}, time.Now)
	snap, _ := dirs[1].Snapshot(ctx, m.ID)
	if _, err := svc.PutRouting(ctx, m.ID, connectors.RoutingParams{Default: &connectors.Route{Connectors: []string{snap.Connectors[0].ID}}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		snap, err := dirs[1].Snapshot(ctx, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Routing != nil {
			t.Logf("the other replica routes by the change %v after it", time.Since(start).Round(time.Millisecond))
			break
		}
		// The snapshot's TTL is an hour: following within the 30 s the
		// test waits (on a loaded machine) is the notice's doing.
		if time.Since(start) > 30*time.Second {
			t.Fatal("the other replica still routes by its old snapshot after 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
