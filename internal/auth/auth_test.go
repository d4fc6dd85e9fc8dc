package auth

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestPasswordHashing(t *testing.T) {
	h := NewHasher(2)
	ctx := context.Background()
	enc, err := h.Hash(ctx, "correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(enc, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Fatalf("hash %q is not argon2id with m=19 MiB, t=2, p=1", enc)
	}
	again, _ := h.Hash(ctx, "correct horse battery")
	if again == enc {
		t.Fatal("two hashes of one password are equal: the salt is not random")
	}
	cases := []struct {
		enc, password string
		want          bool
	}{
		{enc, "correct horse battery", true},
		{enc, "correct horse batterY", false},
		{enc, "", false},
		{"", "gatehouse-dummy-password", false}, // the dummy never matches
	}
	for _, c := range cases {
		if got, err := h.Verify(ctx, c.enc, c.password); err != nil || got != c.want {
			t.Errorf("Verify(%.20q, %q) = %v, %v; want %v", c.enc, c.password, got, err, c.want)
		}
	}
	if _, err := h.Verify(ctx, "$bcrypt$whatever", "x"); err == nil {
		t.Error("a foreign hash format verified without error")
	}
}

// A test hasher writes cheap hashes, and each kind of hasher verifies the
// other's: the parameters travel in the hash.
func TestTestHasherInteroperates(t *testing.T) {
	ctx := context.Background()
	prod, cheap := NewHasher(1), NewTestHasher(1)
	weak, err := cheap.Hash(ctx, "correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(weak, "$argon2id$v=19$m=64,t=1,p=1$") {
		t.Fatalf("test hash %q", weak)
	}
	strong, err := prod.Hash(ctx, "correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		h    *Hasher
		enc  string
		name string
	}{{prod, weak, "production hasher, test hash"}, {cheap, strong, "test hasher, production hash"}} {
		if ok, err := c.h.Verify(ctx, c.enc, "correct horse battery"); err != nil || !ok {
			t.Errorf("%s: the password did not verify (%v)", c.name, err)
		}
		if ok, err := c.h.Verify(ctx, c.enc, "correct horse batterY"); err != nil || ok {
			t.Errorf("%s: a wrong password verified (%v)", c.name, err)
		}
	}
}

func TestHasherHonoursCancellation(t *testing.T) {
	h := NewHasher(1)
	h.sem <- struct{}{} // the only slot is taken
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.Hash(ctx, "password1"); err == nil {
		t.Fatal("Hash ran without a free slot")
	}
}

func TestTokens(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tk := NewTokens([]byte(strings.Repeat("s", 32)), "gatehouse", "gatehouse-dashboard", func() time.Time { return now })
	tok, err := tk.Issue("mer_1", "mem_1", "ses_1", now, now.Add(SessionTTL))
	if err != nil {
		t.Fatal(err)
	}
	c, err := tk.Verify(tok)
	if err != nil || c.MerchantID != "mer_1" || c.SessionID != "ses_1" || !c.ExpiresAt.Equal(now.Add(24*time.Hour)) {
		t.Fatalf("claims %+v, %v", c, err)
	}
	now = now.Add(SessionTTL + 10*time.Second) // past exp and the 5 s leeway
	if _, err := tk.Verify(tok); err != ErrBadToken {
		t.Fatalf("expired token: %v, want ErrBadToken", err)
	}
	other := NewTokens([]byte(strings.Repeat("s", 32)), "gatehouse", "another-audience", func() time.Time { return now })
	tok2, _ := other.Issue("mer_1", "mem_1", "ses_1", now, now.Add(time.Hour))
	if _, err := tk.Verify(tok2); err != ErrBadToken {
		t.Fatalf("token for another audience: %v", err)
	}
}
