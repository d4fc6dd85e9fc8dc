package store_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// streamCredential makes a live key or session of the merchant and returns
// it with the function that revokes it.
func streamCredential(t *testing.T, s *store.Store, merchantID string, session bool) (events.Credential, func() error) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	if session {
		sess := auth.Session{ID: ids.New("ses"), MerchantID: merchantID, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if err := s.CreateSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
		return events.Credential{Kind: events.CredentialSession, ID: sess.ID}, func() error {
			_, err := s.RevokeSession(ctx, sess.ID)
			return err
		}
	}
	k := apikeys.Key{ID: ids.New("key"), MerchantID: merchantID, Environment: apikeys.Sandbox,
		PublicKey: "pk_test_" + ids.New("p"), SecretDigest: apikeys.Digest(ids.New("s")), SecretLast4: "abcd", CreatedAt: now}
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	return events.Credential{Kind: events.CredentialKey, ID: k.ID}, func() error {
		_, err := s.RevokeKey(ctx, merchantID, k.ID)
		return err
	}
}

// TestStreamReadsNothingAfterRevocation is a randomized property test on
// PostgreSQL: in each round, writers commit events of a merchant (some in
// transactions held open a while) while a stream's reader reads them with
// After, and the stream's key or session is revoked at a random moment. An
// event whose transaction began after the revocation was answered is never
// returned, and once the writers stop the reader is told ErrRevoked.
func TestStreamReadsNothingAfterRevocation(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 26))
	m := newMerchant(t, s, "ada@example.com")
	insert := `INSERT INTO events (id, merchant_id, environment, type, body, created_at) VALUES ($1, $2, 'sandbox', 'charge.created', '{}', now())`

	var before, after, read int
	for round := range 12 {
		cred, revoke := streamCredential(t, s, m.ID, round%3 == 2)
		h, err := s.Horizon(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cur := events.Cursor{TxID: h}
		var revoked, stop atomic.Bool
		var mu sync.Mutex
		post := map[string]bool{} // events whose transaction began after the revocation's answer
		pre := 0
		var wg sync.WaitGroup
		for w := range 1 + r.IntN(3) {
			hold := time.Duration(r.IntN(4)) * time.Millisecond
			wr := rand.New(rand.NewPCG(seed, uint64(round*10+w)))
			wg.Go(func() {
				for !stop.Load() {
					after := revoked.Load()
					tx, err := db.Pool.Begin(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					id := ids.NewUUID()
					if _, err := tx.Exec(ctx, insert, id, m.ID); err != nil {
						t.Error(err)
						_ = tx.Rollback(ctx)
						return
					}
					if wr.IntN(3) == 0 {
						time.Sleep(hold)
					}
					if err := tx.Commit(ctx); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if after {
						post[id] = true
					} else {
						pre++
					}
					mu.Unlock()
				}
			})
		}
		var got []events.Event
		var nread atomic.Int64 // len(got), for the main goroutine
		ended := make(chan error, 1)
		rr := rand.New(rand.NewPCG(seed, uint64(round)))
		go func() {
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				evs, next, err := s.After(ctx, m.ID, cred, cur, 1+rr.IntN(20))
				if err != nil {
					ended <- err
					return
				}
				got, cur = append(got, evs...), next
				nread.Store(int64(len(got)))
			}
			ended <- errors.New("the reader was never told the credential was revoked")
		}()
		time.Sleep(time.Duration(5+r.IntN(40)) * time.Millisecond)
		// On a loaded machine the reader may not have read anything yet:
		// the revocation then tests nothing of what was read. Most rounds
		// wait (at most 5 s) until it has; a quarter revoke at once.
		for wait := time.Now().Add(5 * time.Second); round%4 != 3 && nread.Load() == 0 && time.Now().Before(wait); {
			time.Sleep(time.Millisecond)
		}
		if err := revoke(); err != nil {
			t.Fatal(err)
		}
		revoked.Store(true)
		time.Sleep(time.Duration(20+r.IntN(60)) * time.Millisecond)
		stop.Store(true)
		wg.Wait()
		err = <-ended
		for _, e := range got {
			if post[e.ID] {
				t.Errorf("round %d (%s): event %s, committed after the revocation was answered, was read", round, cred.Kind, e.ID)
			}
		}
		if !errors.Is(err, events.ErrRevoked) {
			t.Fatalf("round %d (%s): the reader ended with %v, want ErrRevoked", round, cred.Kind, err)
		}
		before, after, read = before+pre, after+len(post), read+len(got)
	}
	t.Logf("12 rounds: events committed before the revocation %d, after it %d; read %d", before, after, read)
	if read == 0 || after == 0 {
		t.Fatalf("the rounds read %d events and committed %d after revocations: nothing was tested", read, after)
	}
}

// TestStreamPollFindsRevokedCredentials: the hub's poll names the open
// credentials that are no longer live (a revoked key, a revoked or expired
// session, one that does not exist) and none that are.
func TestStreamPollFindsRevokedCredentials(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	m := newMerchant(t, s, "ada@example.com")
	liveKey, _ := streamCredential(t, s, m.ID, false)
	goneKey, revokeKey := streamCredential(t, s, m.ID, false)
	liveSession, _ := streamCredential(t, s, m.ID, true)
	goneSession, revokeSession := streamCredential(t, s, m.ID, true)
	now := time.Now().UTC().Truncate(time.Second)
	expired := auth.Session{ID: ids.New("ses"), MerchantID: m.ID, CreatedAt: now.Add(-2 * time.Hour), ExpiresAt: now.Add(-time.Hour)}
	if err := s.CreateSession(ctx, expired); err != nil {
		t.Fatal(err)
	}
	for _, f := range []func() error{revokeKey, revokeSession} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	h, err := s.Horizon(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unknown := events.Credential{Kind: events.CredentialKey, ID: ids.New("key")}
	exp := events.Credential{Kind: events.CredentialSession, ID: expired.ID}
	p, err := s.Poll(ctx, []string{m.ID}, []events.Credential{liveKey, goneKey, liveSession, goneSession, exp, unknown}, h)
	if err != nil {
		t.Fatal(err)
	}
	got := map[events.Credential]bool{}
	for _, c := range p.Revoked {
		got[c] = true
	}
	for c, want := range map[events.Credential]bool{liveKey: false, goneKey: true, liveSession: false, goneSession: true, exp: true, unknown: true} {
		if got[c] != want {
			t.Errorf("%s %s: reported revoked %v, want %v", c.Kind, c.ID, got[c], want)
		}
	}
	for _, c := range []events.Credential{liveKey, liveSession} {
		if _, _, err := s.After(ctx, m.ID, c, events.Cursor{TxID: h}, 10); err != nil {
			t.Errorf("After with the live %s: %v", c.Kind, err)
		}
	}
	for _, c := range []events.Credential{goneKey, goneSession, exp, unknown, {Kind: "other", ID: liveKey.ID}} {
		if _, _, err := s.After(ctx, m.ID, c, events.Cursor{TxID: h}, 10); !errors.Is(err, events.ErrRevoked) {
			t.Errorf("After with %s %s: %v, want ErrRevoked", c.Kind, c.ID, err)
		}
	}
	// Another merchant's live key is not live for this merchant's stream.
	other := newMerchant(t, s, "bob@example.com")
	otherKey, _ := streamCredential(t, s, other.ID, false)
	if _, _, err := s.After(ctx, m.ID, otherKey, events.Cursor{TxID: h}, 10); !errors.Is(err, events.ErrRevoked) {
		t.Errorf("After with another merchant's key: %v, want ErrRevoked", err)
	}
}
