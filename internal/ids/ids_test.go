package ids

import (
	"strings"
	"testing"
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
