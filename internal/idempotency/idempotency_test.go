package idempotency_test

import (
	"testing"

	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
)

// FuzzScopesNeverMeet: for any two keys a caller may send, a key sent with
// the public key is stored apart from every key of the server's space, the
// same one included, and a server key is stored as sent (as earlier releases
// stored it).
func FuzzScopesNeverMeet(f *testing.F) {
	for _, s := range [][2]string{
		{"order-1043", "order-1043"}, {"a", "a"}, {"public:x", "\x1fpublic:x"}, {"x", "public:x"},
		{" ", " "}, {"~", "~"}, {"dashboard_1", "dashboard_1"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, public, server string) {
		if idempotency.Validate(public) != nil || idempotency.Validate(server) != nil {
			return
		}
		p := idempotency.NewRequest(idempotency.ScopePublic, public, nil)
		s := idempotency.NewRequest(idempotency.ScopeServer, server, nil)
		if p.Key == s.Key {
			t.Fatalf("public %q and server %q are both stored as %q", public, server, p.Key)
		}
		if s.Key != server {
			t.Fatalf("server key %q stored as %q", server, s.Key)
		}
		if q := idempotency.NewRequest(idempotency.ScopePublic, public, nil); q.Key != p.Key {
			t.Fatalf("public %q stored as %q, then %q", public, p.Key, q.Key)
		}
	})
}
