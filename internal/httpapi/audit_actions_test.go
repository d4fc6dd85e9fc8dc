package httpapi

import (
	"strings"
	"testing"
)

// Every state-changing row of the authorization table has its audit action,
// the same one on the API and the dashboard for the same change, and no
// action names a route that is not in the table.
func TestEveryWriteRouteHasAnAction(t *testing.T) {
	t.Parallel()
	for key := range needs {
		method, _, _ := strings.Cut(key, " ")
		if method == "GET" {
			continue
		}
		a, ok := actions[key]
		if !ok {
			t.Errorf("%s has no audit action (audit.go)", key)
			continue
		}
		if object, _, _ := strings.Cut(a.name, "."); object != a.object && !(a.object == "merchant" && object == "account") &&
			!(a.object == "member" && object == "mfa") {
			t.Errorf("%s: action %s on object type %s", key, a.name, a.object)
		}
	}
	for key := range actions {
		if _, ok := needs[key]; !ok {
			t.Errorf("audit action of %s, which the authorization table does not have", key)
		}
	}
	// A route missing from the table still gets an action of its own.
	if got := actionOf("POST", "/v1/widgets/:id/polish"); got.name != "widget.polish" || got.object != "widget" || got.param != "id" {
		t.Errorf("derived action: %+v", got)
	}
	if got := actionOf("DELETE", "/v1/me/widgets/:id"); got.name != "widget.delete" {
		t.Errorf("derived action: %+v", got)
	}
}

func TestClipKeepsWholeCharacters(t *testing.T) {
	t.Parallel()
	if got := clip(strings.Repeat("é", 300), 511); len(got) != 510 || !strings.HasSuffix(got, "é") {
		t.Errorf("clip: %d bytes", len(got))
	}
	if got := clip("ok\xff", 10); got != "ok\uFFFD" {
		t.Errorf("clip of invalid UTF-8: %q", got)
	}
}
