package cache

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// RoutingChannel is the pub/sub channel on which replicas announce a
// change of a merchant's connectors or routing.
const RoutingChannel = "gatehouse:routing:changed"

// Notices carries change notices between API replicas over Redis pub/sub
// (a cluster broadcasts a PUBLISH to every node). A notice is only a hint:
// whoever missed one still drops its copy after the copy's TTL.
type Notices struct {
	rdb     redis.UniversalClient
	channel string
}

// NewNotices returns notices on channel.
func NewNotices(rdb redis.UniversalClient, channel string) *Notices {
	return &Notices{rdb: rdb, channel: channel}
}

// Publish announces that key changed.
func (n *Notices) Publish(ctx context.Context, key string) error {
	return n.rdb.Publish(ctx, n.channel, key).Err()
}

// Listen calls forget with every key announced until ctx ends (it returns
// then), and
// forgetAll each time the subscription is (re)established: notices sent
// while it was down are lost, so every copy is suspect.
func (n *Notices) Listen(ctx context.Context, forget func(key string), forgetAll func(), log *slog.Logger) {
	for ctx.Err() == nil {
		sub := n.rdb.Subscribe(ctx, n.channel)
		// A blocked read does not watch ctx: closing the subscription ends it.
		stop := context.AfterFunc(ctx, func() { _ = sub.Close() })
		n.receive(ctx, sub, forget, forgetAll, log)
		stop()
		_ = sub.Close()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (n *Notices) receive(ctx context.Context, sub *redis.PubSub, forget func(string), forgetAll func(), log *slog.Logger) {
	for {
		msg, err := sub.Receive(ctx)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("routing change notices interrupted; cached routing expires by its TTL meanwhile", "err", err)
			}
			return
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				forgetAll()
			}
		case *redis.Message:
			forget(m.Payload)
		}
	}
}
