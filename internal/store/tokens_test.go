package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// A token is usable by its merchant and environment until it expires; the
// retention prune clears the cards of expired tokens and deletes tokens a
// retention period after they expired.
func TestCardTokenExpiryAndPrune(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	ctx := context.Background()
	m := newMerchant(t, s, "ada@example.com")
	other := newMerchant(t, s, "grace@example.com")
	now := time.Now().UTC().Truncate(time.Millisecond)
	last4, fp, month, year := "4242", "fp", 12, 2030
	token := func(created time.Time) charges.Token {
		tk := charges.Token{ID: ids.New("ctok"), MerchantID: m.ID, Environment: "sandbox", KeyID: "key_1",
			Card:      charges.Card{Brand: "visa", Last4: &last4, ExpMonth: &month, ExpYear: &year, Fingerprint: &fp},
			CreatedAt: created, ExpiresAt: created.Add(charges.TokenTTL)}
		if _, err := s.CreateToken(ctx, tk, []byte("sealed"), nil, idempotency.Response{}); err != nil {
			t.Fatal(err)
		}
		return tk
	}
	fresh := token(now)
	expired := token(now.Add(-time.Hour))
	ancient := token(now.Add(-charges.TokenRetention - time.Hour))

	if got, sealed, err := s.UsableToken(ctx, m.ID, "sandbox", fresh.ID, now); err != nil || got.ID != fresh.ID || string(sealed) != "sealed" ||
		*got.Card.Last4 != "4242" || !got.ExpiresAt.Equal(fresh.ExpiresAt) {
		t.Fatalf("fresh token: %+v %q %v", got, sealed, err)
	}
	for name, try := range map[string]func() error{
		"expired":          func() error { _, _, err := s.UsableToken(ctx, m.ID, "sandbox", expired.ID, now); return err },
		"another merchant": func() error { _, _, err := s.UsableToken(ctx, other.ID, "sandbox", fresh.ID, now); return err },
		"another env":      func() error { _, _, err := s.UsableToken(ctx, m.ID, "live", fresh.ID, now); return err },
		"after its expiry": func() error { _, _, err := s.UsableToken(ctx, m.ID, "sandbox", fresh.ID, fresh.ExpiresAt); return err },
	} {
		if err := try(); apperr.KindOf(err) != apperr.KindNotFound {
			t.Errorf("%s: %v, want NotFound", name, err)
		}
	}

	cleared, deleted, err := s.PruneCardTokens(ctx, now)
	if err != nil || cleared != 2 || deleted != 1 {
		t.Fatalf("prune: cleared %d deleted %d (%v), want 2 (expired, ancient) and 1 (ancient)", cleared, deleted, err)
	}
	var n int
	var sealedLeft int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(card_sealed) FROM card_tokens`).Scan(&n, &sealedLeft); err != nil {
		t.Fatal(err)
	}
	if n != 2 || sealedLeft != 1 {
		t.Fatalf("%d tokens with %d cards left, want 2 with 1 (the fresh one)", n, sealedLeft)
	}
	if _, _, err := s.UsableToken(ctx, m.ID, "sandbox", fresh.ID, now); err != nil {
		t.Fatalf("the fresh token after the prune: %v", err)
	}
	var ancientLeft int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM card_tokens WHERE id = $1`, ancient.ID).Scan(&ancientLeft); err != nil || ancientLeft != 0 {
		t.Fatalf("the ancient token: %d rows (%v), want deleted", ancientLeft, err)
	}
}
