package auth

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
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
	sem     chan struct{}
	wait    time.Duration
	dummy   string
	memory  uint32 // KiB
	passes  uint32
	checked atomic.Int64
}

// MaxHashWait is how long a hash waits for a free slot before the request is
// refused as unavailable.
const MaxHashWait = time.Second

// ErrBusy is returned when every hashing slot stayed taken for MaxHashWait.
var ErrBusy = &apperr.Error{Kind: apperr.KindUnavailable, Code: apperr.CodeUnavailable,
	Message: "Too many sign-ins are being checked right now. Please retry in a second."}

// NewHasher returns a Hasher that runs at most maxConcurrent hashes at once.
func NewHasher(maxConcurrent int) *Hasher {
	return newHasher(maxConcurrent, argonMemory, argonTime)
}

// NewTestHasher returns a Hasher whose new hashes cost 64 KiB and one pass:
// for tests that sign many people in, where the race detector makes each
// 19 MiB hash cost seconds of CPU. It verifies hashes of any cost, as
// NewHasher does; only the hashes it writes are weak.
func NewTestHasher(maxConcurrent int) *Hasher {
	return newHasher(maxConcurrent, 64, 1)
}

func newHasher(maxConcurrent int, memory, passes uint32) *Hasher {
	h := &Hasher{sem: make(chan struct{}, max(1, maxConcurrent)), wait: MaxHashWait, memory: memory, passes: passes}
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
	key := argon2.IDKey(password, salt, h.passes, h.memory, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, h.memory, h.passes, argonThreads, b64.EncodeToString(salt), b64.EncodeToString(key))
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
	ok, err := h.VerifyEach(ctx, []string{encoded}, password)
	if err != nil {
		return false, err
	}
	return ok[0], nil
}

// VerifyEach reports, for each hash, whether password matches it, an empty
// one checked against the dummy as Verify does. Every hash is checked, in
// one hashing slot taken once, so the time depends on how many hashes there
// are, not on which of them match or are dummies.
func (h *Hasher) VerifyEach(ctx context.Context, hashes []string, password string) ([]bool, error) {
	checks := make([]parsedHash, len(hashes))
	for i, encoded := range hashes {
		c, err := parseHash(cmp.Or(encoded, h.dummy))
		if err != nil {
			return nil, err
		}
		checks[i] = c
	}
	if err := h.acquire(ctx); err != nil {
		return nil, err
	}
	defer h.release()
	out := make([]bool, len(checks))
	for i, c := range checks {
		got := argon2.IDKey([]byte(password), c.salt, c.passes, c.memory, c.threads, uint32(len(c.key)))
		out[i] = subtle.ConstantTimeCompare(got, c.key) == 1 && hashes[i] != ""
	}
	h.checked.Add(int64(len(checks)))
	return out, nil
}

// parsedHash is an argon2id PHC string taken apart.
type parsedHash struct {
	salt, key      []byte
	passes, memory uint32
	threads        uint8
}

func parseHash(encoded string) (parsedHash, error) {
	var version, memory, passes int
	var threads uint8
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return parsedHash{}, errors.New("auth: unsupported password hash")
	}
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return parsedHash{}, errors.New("auth: unsupported argon2 version")
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &memory, &passes, &threads); err != nil {
		return parsedHash{}, errors.New("auth: bad argon2 parameters")
	}
	salt, err := b64.DecodeString(parts[4])
	if err != nil {
		return parsedHash{}, errors.New("auth: bad argon2 salt")
	}
	key, err := b64.DecodeString(parts[5])
	if err != nil {
		return parsedHash{}, errors.New("auth: bad argon2 key")
	}
	return parsedHash{salt: salt, key: key, passes: uint32(passes), memory: uint32(memory), threads: threads}, nil
}

// Checked is how many password hashes (dummies included) this Hasher has
// checked: what a sign-in costs, which must not depend on the account.
func (h *Hasher) Checked() int64 { return h.checked.Load() }
