// Package keyring derives Gatehouse's working keys from ENCRYPTION_KEY and
// offers the few primitives built on them: AES-256-GCM sealing of data kept
// encrypted at rest (card data until the provider answers, webhook secrets),
// random data keys kept wrapped by a derived key (a saved card's, which
// dies with it), and keyed fingerprints (card fingerprints, idempotency
// request hashes) from which the input cannot be recovered by guessing.
package keyring

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"sync"
)

// Purposes name independent keys derived from the master key.
const (
	PurposeCard        = "gatehouse card data v1"
	PurposeWebhook     = "gatehouse webhook secrets v1"
	PurposeFingerprint = "gatehouse card fingerprint v1"
	PurposeIdempotency = "gatehouse idempotency fingerprint v1"
	PurposeCSRF        = "gatehouse dashboard csrf v1"
	PurposeChallenge   = "gatehouse challenge link v1"
	PurposeConnector   = "gatehouse connector credentials v1"
	PurposeTOTP        = "gatehouse totp secrets v1"
	// PurposeCardDataKey wraps the data key of each saved card (see
	// NewDataKey); the card itself is sealed under its data key.
	PurposeCardDataKey = "gatehouse saved card data keys v1"
)

// Keyring holds the master key and the keys derived from it, derived once
// per purpose (the hot path seals and fingerprints on every charge).
type Keyring struct {
	master  []byte
	derived sync.Map // purpose -> []byte
	aeads   sync.Map // purpose -> cipher.AEAD (safe for concurrent use)
}

// New returns a Keyring for a 32-byte master key.
func New(master []byte) (*Keyring, error) {
	if len(master) != 32 {
		return nil, errors.New("keyring: the master key must be 32 bytes")
	}
	return &Keyring{master: append([]byte(nil), master...)}, nil
}

func (k *Keyring) derive(purpose string) []byte {
	if key, ok := k.derived.Load(purpose); ok {
		return key.([]byte)
	}
	key, err := hkdf.Key(sha256.New, k.master, nil, purpose, 32)
	if err != nil {
		panic(err) // only for lengths hkdf cannot produce
	}
	k.derived.Store(purpose, key)
	return key
}

// Seal encrypts plaintext for purpose with AES-256-GCM; the nonce is prefixed.
// aad binds the ciphertext to its owner (e.g. the charge id).
func (k *Keyring) Seal(purpose string, plaintext, aad []byte) ([]byte, error) {
	gcm, err := k.aead(purpose)
	if err != nil {
		return nil, err
	}
	return seal(gcm, plaintext, aad)
}

func seal(gcm cipher.AEAD, plaintext, aad []byte) ([]byte, error) {
	nonce := make([]byte, gcm.NonceSize(), gcm.NonceSize()+len(plaintext)+gcm.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return gcm.Seal(nonce, nonce, plaintext, aad), nil
}

// Open decrypts what Seal produced with the same purpose and aad.
func (k *Keyring) Open(purpose string, sealed, aad []byte) ([]byte, error) {
	gcm, err := k.aead(purpose)
	if err != nil {
		return nil, err
	}
	return open(gcm, sealed, aad)
}

func open(gcm cipher.AEAD, sealed, aad []byte) ([]byte, error) {
	if len(sealed) < gcm.NonceSize() {
		return nil, errors.New("keyring: sealed data too short")
	}
	out, err := gcm.Open(nil, sealed[:gcm.NonceSize()], sealed[gcm.NonceSize():], aad)
	if err != nil {
		return nil, errors.New("keyring: cannot open sealed data")
	}
	return out, nil
}

func (k *Keyring) aead(purpose string) (cipher.AEAD, error) {
	if a, ok := k.aeads.Load(purpose); ok {
		return a.(cipher.AEAD), nil
	}
	block, err := aes.NewCipher(k.derive(purpose))
	if err != nil {
		return nil, err
	}
	a, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	k.aeads.Store(purpose, a)
	return a, nil
}

// DataKeySize is the length of a data key: AES-256.
const DataKeySize = 32

// DataKey is a random AES-256-GCM key of one owner (a saved card), kept only
// wrapped by a derived key: once its wrapped form is deleted, whatever it
// sealed cannot be opened, wherever copies of the sealed bytes remain.
type DataKey struct {
	aead cipher.AEAD
}

// NewDataKey returns a fresh random data key and its wrapped form: the key
// sealed for purpose (e.g. PurposeCardDataKey) with aad binding it to its
// owner.
func (k *Keyring) NewDataKey(purpose string, aad []byte) (DataKey, []byte, error) {
	raw := make([]byte, DataKeySize)
	defer clear(raw)
	if _, err := rand.Read(raw); err != nil {
		return DataKey{}, nil, err
	}
	dk, err := newDataKey(raw)
	if err != nil {
		return DataKey{}, nil, err
	}
	wrapped, err := k.Seal(purpose, raw, aad)
	if err != nil {
		return DataKey{}, nil, err
	}
	return dk, wrapped, nil
}

// OpenDataKey unwraps what NewDataKey returned, with the same purpose and aad.
func (k *Keyring) OpenDataKey(purpose string, wrapped, aad []byte) (DataKey, error) {
	raw, err := k.Open(purpose, wrapped, aad)
	if err != nil {
		return DataKey{}, err
	}
	defer clear(raw)
	if len(raw) != DataKeySize {
		return DataKey{}, errors.New("keyring: a wrapped data key of the wrong size")
	}
	return newDataKey(raw)
}

func newDataKey(raw []byte) (DataKey, error) {
	block, err := aes.NewCipher(raw)
	if err != nil {
		return DataKey{}, err
	}
	a, err := cipher.NewGCM(block)
	if err != nil {
		return DataKey{}, err
	}
	return DataKey{aead: a}, nil
}

// Seal encrypts plaintext under the data key with AES-256-GCM, the nonce
// prefixed; aad binds the ciphertext to its owner.
func (d DataKey) Seal(plaintext, aad []byte) ([]byte, error) {
	if d.aead == nil {
		return nil, errors.New("keyring: no data key")
	}
	return seal(d.aead, plaintext, aad)
}

// Open decrypts what Seal produced under the same data key and aad.
func (d DataKey) Open(sealed, aad []byte) ([]byte, error) {
	if d.aead == nil {
		return nil, errors.New("keyring: no data key")
	}
	return open(d.aead, sealed, aad)
}

// AssociatedData joins parts (owner ids) into associated data, each part
// length-prefixed so that different splits never collide.
func AssociatedData(parts ...string) []byte {
	var b bytes.Buffer
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		b.Write(n[:])
		b.WriteString(p)
	}
	return b.Bytes()
}

// MAC returns HMAC-SHA256 under the purpose's key over the parts, each
// length-prefixed so that different splits never collide.
func (k *Keyring) MAC(purpose string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, k.derive(purpose))
	writeParts(m, parts)
	return m.Sum(nil)
}

func writeParts(h hash.Hash, parts [][]byte) {
	var n [8]byte
	for _, p := range parts {
		l := uint64(len(p))
		for i := range n {
			n[i] = byte(l >> (56 - 8*i))
		}
		h.Write(n[:])
		h.Write(p)
	}
}
