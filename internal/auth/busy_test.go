package auth

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
)

// TestHasherRefusesWhenBusy: with every slot taken for longer than the wait,
// a hash is refused as unavailable at once after the wait, not queued.
func TestHasherRefusesWhenBusy(t *testing.T) {
	h := NewHasher(1)
	h.wait = 50 * time.Millisecond
	if err := h.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := h.Verify(context.Background(), "", "a password")
	waited := time.Since(start)
	if !errors.Is(err, ErrBusy) || apperr.KindOf(err) != apperr.KindUnavailable {
		t.Fatalf("Verify with every slot taken: %v, want ErrBusy (unavailable)", err)
	}
	if waited < h.wait {
		t.Fatalf("refused after %s, before the %s wait", waited, h.wait)
	}
	h.release()
	if ok, err := h.Verify(context.Background(), "", "a password"); err != nil || ok {
		t.Fatalf("Verify with a free slot: %v, %v; want false, nil", ok, err)
	}
}
