package ratelimit

import (
	"testing"
	"time"
)

// The memory of refusals holds at most max keys; expired ones make room.
func TestOverMemoIsBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	m := newOverMemo(func() time.Time { return now }, 2)
	refused := Decision{Limit: 5, Reset: 10 * time.Second}
	m.note("a", refused)
	m.note("b", Decision{Limit: 5, Reset: time.Second})
	m.note("c", refused)
	if _, ok := m.get("c"); ok {
		t.Fatal("a third key was held by a memo of 2")
	}
	if d, ok := m.get("a"); !ok || d.Reset != 10*time.Second || d.Remaining != 0 || d.Limit != 5 {
		t.Fatalf("a: %+v %v", d, ok)
	}
	now = now.Add(2 * time.Second) // b's window has freed
	m.note("c", refused)
	if _, ok := m.get("c"); !ok {
		t.Fatal("c not held once b expired")
	}
	if _, ok := m.get("b"); ok {
		t.Fatal("b held after its window")
	}
	if d, ok := m.get("a"); !ok || d.Reset != 8*time.Second {
		t.Fatalf("a after 2 s: %+v %v", d, ok)
	}
}
