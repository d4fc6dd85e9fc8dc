package ids

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

func TestNewSortsByCreation(t *testing.T) {
	prev := New("key")
	for i := 0; i < 2000; i++ {
		id := New("key")
		if !Valid("key", id) {
			t.Fatalf("New made an invalid id %q", id)
		}
		if id <= prev {
			t.Fatalf("ids out of order: %q then %q", prev, id)
		}
		prev = id
	}
}

func TestValid(t *testing.T) {
	good := New("mer")
	cases := map[string]bool{
		good:                                     true,
		strings.Replace(good, "mer_", "key_", 1): false,
		"mer_":                                   false,
		"mer_" + strings.Repeat("z", 26):         false, // z is outside the alphabet
		good + "0":                               false,
		"we_" + strings.Repeat("0", 25) + "s":    true,
		"we_" + strings.Repeat("0", 25) + "v":    false, // same bytes as ...s: padding bits set
		"":                                       false,
	}
	for id, want := range cases {
		prefix, _, _ := strings.Cut(id, "_")
		if prefix != "we" {
			prefix = "mer"
		}
		if got := Valid(prefix, id); got != want {
			t.Errorf("Valid(mer, %q) = %v, want %v", id, got, want)
		}
	}
}

// UUIDFloor(t) sorts at or before every UUIDv7 made at t or later, after
// every one made before t's millisecond, and is a valid UUIDv7 itself.
func TestUUIDFloor(t *testing.T) {
	before := time.Now()
	id := NewUUID()
	after := time.Now()
	if floor := UUIDFloor(before); floor > id {
		t.Errorf("UUIDFloor(just before) %s sorts after %s", floor, id)
	}
	if floor := UUIDFloor(after.Add(2 * time.Millisecond)); floor <= id {
		t.Errorf("UUIDFloor(2 ms later) %s sorts at or before %s", floor, id)
	}
	at := time.Date(2026, 11, 25, 18, 0, 0, 123456789, time.UTC)
	u, err := uuid.Parse(UUIDFloor(at))
	var ms int64
	for _, b := range u[:6] {
		ms = ms<<8 | int64(b)
	}
	if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 || ms != at.UnixMilli() {
		t.Errorf("UUIDFloor(%s) = %s (%v): want a UUIDv7 of that millisecond", at, u, err)
	}
	if !ValidUUID(UUIDFloor(at)) {
		t.Errorf("UUIDFloor(%s) = %s is not a canonical UUID", at, UUIDFloor(at))
	}
}

// Floor(prefix, t) sorts at or before every id New makes at t or later,
// after every one made before t's millisecond, and is a valid id itself.
func TestFloor(t *testing.T) {
	before := time.Now()
	id := New("txn")
	after := time.Now()
	if floor := Floor("txn", before); floor > id {
		t.Errorf("Floor(just before) %s sorts after %s", floor, id)
	}
	if floor := Floor("txn", after.Add(2*time.Millisecond)); floor <= id {
		t.Errorf("Floor(2 ms later) %s sorts at or before %s", floor, id)
	}
	at := time.Date(2026, 11, 25, 18, 0, 0, 123456789, time.UTC)
	floor := Floor("txn", at)
	u, ok := UUIDOf("txn", floor)
	if !ok || !Valid("txn", floor) || u != UUIDFloor(at) {
		t.Errorf("Floor(txn, %s) = %s: want a valid id over UUIDFloor %s, got %s", at, floor, UUIDFloor(at), u)
	}
}
