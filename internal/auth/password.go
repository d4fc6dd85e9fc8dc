package auth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/crypto/argon2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
)

// Argon2id parameters (OWASP's minimum for argon2id): 19 MiB, 2 passes, 1 lane.
const (
	argonMemory  = 19 * 1024
	argonTime    = 2
	argonThreads = 1
	argonKeyLen  = 32
	argonSaltLen = 16
)

var b64 = base64.RawStdEncoding

// Hasher hashes and verifies passwords with argon2id. Each hash takes about
// 19 MiB and 20 ms of one core, so a semaphore caps how many run at once, and
// a request waits at most MaxHashWait for its turn: a login flood gets quick
// 503s instead of a queue that grows without bound, exhausting memory and
// starving other requests.
type Hasher struct {
	sem   chan struct{}
	wait  time.Duration
	dummy string
}

// MaxHashWait is how long a hash waits for a free slot before the request is
// refused as unavailable.
const MaxHashWait = time.Second

// ErrBusy is returned when every hashing slot stayed taken for MaxHashWait.
var ErrBusy = &apperr.Error{Kind: apperr.KindUnavailable, Code: apperr.CodeUnavailable,
	Message: "Too many sign-ins are being checked right now. Please retry in a second."}

// NewHasher returns a Hasher that runs at most maxConcurrent hashes at once.
func NewHasher(maxConcurrent int) *Hasher {
	h := &Hasher{sem: make(chan struct{}, max(1, maxConcurrent)), wait: MaxHashWait}
	h.dummy = h.encode(make([]byte, argonSaltLen), []byte("gatehouse-dummy-password"))
	return h
}

func (h *Hasher) acquire(ctx context.Context) error {
	select {
	case h.sem <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(h.wait)
	defer t.Stop()
	select {
	case h.sem <- struct{}{}:
		return nil
	case <-t.C:
		return ErrBusy
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *Hasher) release() { <-h.sem }

func (h *Hasher) encode(salt, password []byte) string {
	key := argon2.IDKey(password, salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, argonMemory, argonTime, argonThreads, b64.EncodeToString(salt), b64.EncodeToString(key))
}

// Hash returns the PHC string of password with a fresh random salt.
func (h *Hasher) Hash(ctx context.Context, password string) (string, error) {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	if err := h.acquire(ctx); err != nil {
		return "", err
	}
	defer h.release()
	return h.encode(salt, []byte(password)), nil
}

// Verify reports whether password matches encoded. An empty encoded hash is
// checked against a dummy so that an unknown account costs the same time as a
// wrong password.
func (h *Hasher) Verify(ctx context.Context, encoded, password string) (bool, error) {
	dummy := encoded == ""
	if dummy {
		encoded = h.dummy
	}
	var version, memory, passes int
	var threads uint8
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false, errors.New("auth: unsupported password hash")
	}
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, errors.New("auth: unsupported argon2 version")
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &memory, &passes, &threads); err != nil {
		return false, errors.New("auth: bad argon2 parameters")
	}
	salt, err := b64.DecodeString(parts[4])
	if err != nil {
		return false, errors.New("auth: bad argon2 salt")
	}
	want, err := b64.DecodeString(parts[5])
	if err != nil {
		return false, errors.New("auth: bad argon2 key")
	}
	if err := h.acquire(ctx); err != nil {
		return false, err
	}
	got := argon2.IDKey([]byte(password), salt, uint32(passes), uint32(memory), threads, uint32(len(want)))
	h.release()
	return subtle.ConstantTimeCompare(got, want) == 1 && !dummy, nil
}
