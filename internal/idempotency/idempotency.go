// Package idempotency holds the rules of the Idempotency-Key header: a key
// scoped per merchant and per kind of credential (Scope), kept 24 hours; a repeat with the same request replays
// the first response byte for byte; a repeat with another request is refused.
// The record is written in the same transaction as the object the request
// creates, so a crash can never leave one without the other, and a request
// that failed is never recorded.
package idempotency

import (
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
)

// Retention is how long keys are kept.
const Retention = 24 * time.Hour

// MaxKeyLen is the longest key accepted.
const MaxKeyLen = 255

// Request is an idempotent request: the merchant's key, as stored (see
// NewRequest), and a keyed fingerprint of the method, path and body.
type Request struct {
	Key         string
	Fingerprint []byte
}

// Scope is the space of keys a request's credential writes in. Keys of one
// scope never meet the keys of another, even when the header values are the
// same.
type Scope int

const (
	// ScopeServer is the space of the merchant's own servers and people:
	// secret keys and dashboard sessions.
	ScopeServer Scope = iota
	// ScopePublic is the space of requests made with the public key, which
	// anyone can read in a checkout page: a key sent with it must never
	// block or answer a request of the merchant's server.
	ScopePublic
)

// publicPrefix starts the stored key of a ScopePublic request. It begins
// with a control character, which Validate refuses in a header value, so no
// key a caller sends can be equal to a stored public key. Server keys are
// stored as sent, as they always were.
const publicPrefix = "\x1fpublic:"

// NewRequest returns the request of a header value (already validated) in
// scope, with its fingerprint.
func NewRequest(scope Scope, key string, fingerprint []byte) *Request {
	if scope == ScopePublic {
		key = publicPrefix + key
	}
	return &Request{Key: key, Fingerprint: fingerprint}
}

// Response is a stored first response.
type Response struct {
	Status int
	Body   []byte
}

// Validate checks the header value.
func Validate(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return apperr.Invalid("Idempotency-Key", "Idempotency-Key must be 1 to %d characters.", MaxKeyLen)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return apperr.Invalid("Idempotency-Key", "Idempotency-Key must be printable ASCII.")
		}
	}
	return nil
}

// ErrReused is the answer to a key reused with another request.
func ErrReused() error {
	return &apperr.Error{Kind: apperr.KindUnprocessable, Code: apperr.CodeIdempotencyReused,
		Message: "This Idempotency-Key was used with a different request; use a new key for a new request."}
}

// ErrInUse is the answer to a repeat while the first request is still running.
func ErrInUse() error {
	return &apperr.Error{Kind: apperr.KindConflict, Code: apperr.CodeIdempotencyInUse,
		Message: "A request with this Idempotency-Key is still being processed; retry shortly."}
}
