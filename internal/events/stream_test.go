package events_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/events"
)

// FuzzHubBounds drives a hub with a sequence of subscribes and closes across
// three merchants, each with three keys, and checks after every step that
// the streams it holds open stay within each bound (in all, per merchant,
// per credential), that a refusal names the bound it hit (503 for the
// replica's, 429 for a merchant's or a key's), and that a subscribe under
// every bound is accepted, also after closes freed places. The first three
// bytes choose the limits; each further byte is one step.
func FuzzHubBounds(f *testing.F) {
	f.Add([]byte{7, 2, 3, 0, 8, 16, 24, 2, 10, 18, 26, 1, 0, 8})          // one merchant, many keys
	f.Add([]byte{2, 9, 9, 0, 2, 4, 6, 1, 6, 0})                           // the replica's bound
	f.Add([]byte{9, 9, 1, 0, 0, 0, 8, 8, 3, 0, 0})                        // one key
	f.Add([]byte{0, 0, 0, 0, 1, 0, 1, 0, 1})                              // every bound 1
	f.Add([]byte{5, 1, 2, 0, 2, 4, 0, 2, 4, 1, 1, 1, 0, 2, 4, 8, 10, 12}) // merchants apart
	r := rand.New(rand.NewPCG(26, 4))
	for range 40 {
		b := make([]byte, 3+r.IntN(120))
		for i := range b {
			b[i] = byte(r.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 3 {
			return
		}
		limits := events.Limits{Total: 1 + int(data[0]%10), PerMerchant: 1 + int(data[1]%6), PerCredential: 1 + int(data[2]%4)}
		h := events.NewHub(nil, time.Hour, limits, slog.New(slog.DiscardHandler))
		type open struct {
			sub      *events.Subscription
			merchant string
			cred     events.Credential
		}
		var streams []open
		count := func(merchant string, cred *events.Credential) (perMerchant, perCred int) {
			for _, s := range streams {
				if s.merchant == merchant {
					perMerchant++
				}
				if cred != nil && s.cred == *cred {
					perCred++
				}
			}
			return perMerchant, perCred
		}
		for step, b := range data[3:] {
			if b&1 == 1 && len(streams) > 0 {
				i := int(b>>1) % len(streams)
				streams[i].sub.Close()
				streams[i].sub.Close() // twice is once
				streams = append(streams[:i], streams[i+1:]...)
			} else {
				m := int(b>>1) % 3
				merchant := fmt.Sprintf("mer_%d", m)
				cred := events.Credential{Kind: events.CredentialKey, ID: fmt.Sprintf("key_%d_%d", m, int(b>>3)%3)}
				perMerchant, perCred := count(merchant, &cred)
				sub, err := h.Subscribe(merchant, cred)
				switch {
				case err == nil:
					streams = append(streams, open{sub, merchant, cred})
				case len(streams) >= limits.Total:
					if apperr.KindOf(err) != apperr.KindUnavailable {
						t.Fatalf("step %d: refused at the replica's bound with %v, want unavailable", step, err)
					}
				case perMerchant >= limits.PerMerchant || perCred >= limits.PerCredential:
					if apperr.KindOf(err) != apperr.KindRateLimited {
						t.Fatalf("step %d: refused at a merchant's or key's bound with %v, want rate limited", step, err)
					}
				default:
					t.Fatalf("step %d: %s with %d of %d streams, its merchant %d of %d, its key %d of %d: refused with %v",
						step, merchant, len(streams), limits.Total, perMerchant, limits.PerMerchant, perCred, limits.PerCredential, err)
				}
			}
			if got := h.Open(); got != len(streams) {
				t.Fatalf("step %d: the hub counts %d open streams, %d are", step, got, len(streams))
			}
			if len(streams) > limits.Total {
				t.Fatalf("step %d: %d streams open on the replica, bound %d", step, len(streams), limits.Total)
			}
			for _, s := range streams {
				perMerchant, perCred := count(s.merchant, &s.cred)
				if perMerchant > limits.PerMerchant {
					t.Fatalf("step %d: %s holds %d streams, bound %d", step, s.merchant, perMerchant, limits.PerMerchant)
				}
				if perCred > limits.PerCredential {
					t.Fatalf("step %d: %s holds %d streams, bound %d", step, s.cred.ID, perCred, limits.PerCredential)
				}
			}
		}
	})
}

// pollStore is a StreamStore whose Poll answers from PollFn.
type pollStore struct {
	events.StreamStore
	PollFn func(merchants []string, creds []events.Credential) events.Poll
}

func (s pollStore) Horizon(context.Context) (string, error) { return "1", nil }
func (s pollStore) Poll(_ context.Context, merchants []string, creds []events.Credential, _ string) (events.Poll, error) {
	return s.PollFn(merchants, creds), nil
}

// TestHubWakesRevokedStreams: the hub asks, with the merchants it listens
// for, which of its open credentials are no longer live, and wakes their
// streams (whose next read ends them) and no other.
func TestHubWakesRevokedStreams(t *testing.T) {
	revoked := events.Credential{Kind: events.CredentialKey, ID: "key_revoked"}
	live := events.Credential{Kind: events.CredentialKey, ID: "key_live"}
	asked := make(chan []events.Credential, 100)
	st := pollStore{PollFn: func(_ []string, creds []events.Credential) events.Poll {
		select {
		case asked <- creds:
		default:
		}
		return events.Poll{Horizon: "1", Revoked: []events.Credential{revoked}}
	}}
	h := events.NewHub(st, 5*time.Millisecond, events.Limits{Total: 10, PerMerchant: 10, PerCredential: 10}, slog.New(slog.DiscardHandler))
	gone, _ := h.Subscribe("mer_a", revoked)
	kept, _ := h.Subscribe("mer_a", live)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.Run(ctx)
	select {
	case <-gone.Wake:
	case <-time.After(30 * time.Second): // a safety net: the poll is every 5 ms
		t.Fatal("the revoked credential's stream was not woken within 30s")
	}
	if creds := <-asked; len(creds) != 2 {
		t.Errorf("the poll asked about %v, want both open credentials", creds)
	}
	// Several polls later the live one has still not been woken.
	for range 3 {
		<-gone.Wake
	}
	select {
	case <-kept.Wake:
		t.Error("a live credential's stream was woken with no event")
	default:
	}
}
