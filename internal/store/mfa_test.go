package store_test

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/mfa"
	"github.com/gatehouse-pay/gatehouse/internal/store"
)

// checkCounter counts the TOTP codes mfa.Verify checks: each 6-digit code
// compared reads the member's secret once.
type checkCounter struct {
	*store.Store
	checked atomic.Int64
}

func (c *checkCounter) TOTPSecret(ctx context.Context, merchantID, memberID string) ([]byte, error) {
	c.checked.Add(1)
	return c.Store.TOTPSecret(ctx, merchantID, memberID)
}

// TestMFAChallengeChecksAtMostFive: 60 wrong codes sent at once against
// one challenge check at most mfa.ChallengeFailures of them, because each
// is counted in one atomic update before it is compared; every other answer
// says the challenge is spent, and then so does the right code.
func TestMFAChallengeChecksAtMostFive(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	merchant := newMerchant(t, s, "mfa@example.com")
	keys, err := keyring.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	counter := &checkCounter{Store: s}
	svc := mfa.NewService(counter, keys, time.Now)
	m := members.Member{ID: members.OwnerID(merchant.ID), MerchantID: merchant.ID, Email: merchant.Email, Role: "owner"}
	e, err := svc.Enroll(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	first, err := mfa.Code(e.Secret, mfa.Step(now)-1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Confirm(ctx, m, first); err != nil {
		t.Fatal(err)
	}
	m.MFAEnabled = true
	// A code that no step around now has.
	var valid []string
	for step := mfa.Step(now) - 2; step <= mfa.Step(now)+2; step++ {
		c, _ := mfa.Code(e.Secret, step)
		valid = append(valid, c)
	}
	wrong := "000000"
	for n := 1; slices.Contains(valid, wrong); n++ {
		wrong = string(rune('0'+n%10)) + wrong[1:]
	}

	token, _, err := svc.Challenge(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := svc.Challenged(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	counter.checked.Store(0)
	const n = 60
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = svc.Redeem(ctx, ch, m, wrong)
		})
	}
	close(start)
	wg.Wait()
	answers := map[error]int{}
	for _, err := range errs {
		answers[err]++
	}
	if checked := counter.checked.Load(); checked > mfa.ChallengeFailures {
		t.Errorf("%d concurrent wrong codes checked %d, want at most %d", n, checked, mfa.ChallengeFailures)
	}
	if answers[mfa.ErrWrongCode] > mfa.ChallengeFailures || answers[mfa.ErrWrongCode]+answers[mfa.ErrBadChallenge] != n {
		t.Errorf("answers: %d wrong code, %d spent challenge, of %d; want at most %d wrong, the rest spent",
			answers[mfa.ErrWrongCode], answers[mfa.ErrBadChallenge], n, mfa.ChallengeFailures)
	}
	right, _ := mfa.Code(e.Secret, mfa.Step(time.Now()))
	if err := svc.Redeem(ctx, ch, m, right); err != mfa.ErrBadChallenge {
		t.Errorf("the right code after the cap: %v, want ErrBadChallenge", err)
	}
	if _, err := svc.Challenged(ctx, token); err != mfa.ErrBadChallenge {
		t.Errorf("the challenge after the cap: %v, want ErrBadChallenge", err)
	}
	t.Logf("%d concurrent wrong codes: %d checked; answers %d wrong code, %d spent challenge",
		n, counter.checked.Load(), answers[mfa.ErrWrongCode], answers[mfa.ErrBadChallenge])
}
