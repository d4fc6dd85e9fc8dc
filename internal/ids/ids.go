// Package ids makes Gatehouse's identifiers. Prefixed ids ("mer_", "key_",
// "we_", ...) and bare UUIDs are both built on UUIDv7, so every id sorts by
// creation time and lists can page on the id alone.
package ids

import (
	"encoding/base32"
	"strings"
	"time"

	"github.com/google/uuid"
)

// sortable is base32hex in lower case: its alphabet is in ASCII order, so the
// encoded ids sort like the UUIDv7 bytes beneath them.
var sortable = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// New returns prefix + "_" + a 26-character time-ordered random id.
func New(prefix string) string {
	u := uuid.Must(uuid.NewV7())
	return prefix + "_" + sortable.EncodeToString(u[:])
}

// NewUUID returns a UUIDv7 string for charges, refunds, events and deliveries.
func NewUUID() string { return uuid.Must(uuid.NewV7()).String() }

// Valid reports whether id has the given prefix and the shape New makes.
// Lookups use it to answer "not found" without a database round trip.
func Valid(prefix, id string) bool {
	rest, ok := strings.CutPrefix(id, prefix+"_")
	if !ok || len(rest) != 26 {
		return false
	}
	b, err := sortable.DecodeString(rest)
	// Canonical only: the last character's padding bits must be zero, so one
	// id has one spelling (another would decode to the same bytes).
	return err == nil && sortable.EncodeToString(b) == rest
}

// ValidUUID reports whether id is a UUID in its canonical lower-case form.
func ValidUUID(id string) bool {
	if len(id) != 36 {
		return false
	}
	u, err := uuid.Parse(id)
	return err == nil && u.String() == id
}

// UUIDFloor returns the least UUIDv7 of the millisecond of t: every
// UUIDv7 made at t or later sorts at or after it, so a range on an id
// column finds the rows made since t through the id's index.
func UUIDFloor(t time.Time) string {
	var u uuid.UUID
	ms := uint64(t.UnixMilli())
	for i := 0; i < 6; i++ {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6] = 0x70 // version 7
	u[8] = 0x80 // RFC 4122 variant
	return u.String()
}

// Floor returns the least id New(prefix) makes in the millisecond of t:
// every id New makes at t or later sorts at or after it, so a range on a
// prefixed id column finds the rows made since t through the id's index.
func Floor(prefix string, t time.Time) string {
	u := uuid.MustParse(UUIDFloor(t))
	return prefix + "_" + sortable.EncodeToString(u[:])
}

// UUIDOf returns the UUID beneath an id New made with prefix.
func UUIDOf(prefix, id string) (string, bool) {
	if !Valid(prefix, id) {
		return "", false
	}
	b, _ := sortable.DecodeString(strings.TrimPrefix(id, prefix+"_"))
	u, err := uuid.FromBytes(b)
	if err != nil {
		return "", false
	}
	return u.String(), true
}

// FromUUID is the id with prefix of UUID u: the inverse of UUIDOf.
func FromUUID(prefix, u string) (string, bool) {
	parsed, err := uuid.Parse(u)
	if err != nil {
		return "", false
	}
	return prefix + "_" + sortable.EncodeToString(parsed[:]), true
}
