package httpapi_test

import (
	"regexp"
	"strings"
	"testing"
)

// The card field and its script are served with a strict policy: no inline
// script or style anywhere, nothing loaded or called but this origin, and
// framing allowed (the field lives in the merchant's page).
func TestCardFieldIsServedStrict(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for path, wantType := range map[string]string{
		"/js/v1/gatehouse.js":   "text/javascript; charset=utf-8",
		"/elements/v1/card":     "text/html; charset=utf-8",
		"/elements/v1/card.js":  "text/javascript; charset=utf-8",
		"/elements/v1/card.css": "text/css; charset=utf-8",
	} {
		r := h.do("GET", path, "")
		if r.status != 200 || r.header.Get("Content-Type") != wantType || len(r.raw) < 100 {
			t.Errorf("GET %s: %d %q, %d bytes", path, r.status, r.header.Get("Content-Type"), len(r.raw))
		}
		csp := r.header.Get("Content-Security-Policy")
		if !strings.HasPrefix(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors *") ||
			strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		if r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("X-Frame-Options") != "" {
			t.Errorf("GET %s: headers %v", path, r.header)
		}
		if r.header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("GET %s sends CORS headers", path)
		}
	}
	page := h.do("GET", "/elements/v1/card", "")
	csp := page.header.Get("Content-Security-Policy")
	for _, d := range []string{"script-src 'self'", "connect-src 'self'", "form-action 'none'", "base-uri 'none'", "frame-src 'self' https:;"} {
		if !strings.Contains(csp, d) {
			t.Errorf("the card field's policy lacks %s: %s", d, csp)
		}
	}
	html := string(page.raw)
	if m := regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>\s*[^<\s]|<style|\son[a-z]+\s*=|javascript:`).FindString(html); m != "" {
		t.Errorf("the card field has inline script or style: %q", m)
	}
	if page.header.Get("Cache-Control") != "no-store" {
		t.Errorf("the card field's Cache-Control %q, want no-store", page.header.Get("Cache-Control"))
	}
	// Messages: the field answers only the origin that framed it, and the
	// script only the gateway's origin.
	field := string(h.do("GET", "/elements/v1/card.js", "").raw)
	script := string(h.do("GET", "/js/v1/gatehouse.js", "").raw)
	for name, check := range map[string]bool{
		"the field checks the sender's origin and window": strings.Contains(field, "ev.origin !== parentOrigin || ev.source !== window.parent"),
		"the field posts to the parent's origin only":     strings.Contains(field, "window.parent.postMessage(message, parentOrigin)") && !strings.Contains(field, `'*')`),
		"the script checks the sender's origin and frame": strings.Contains(script, "ev.origin !== gatewayOrigin || !self._frame || ev.source !== self._frame.contentWindow"),
		"the script posts to the gateway's origin only":   strings.Contains(script, "postMessage(message, gatewayOrigin)") && !strings.Contains(script, `'*')`),
		"the field hears only its own challenge frame":    strings.Contains(field, "ev.origin !== window.location.origin || ev.source !== frame.contentWindow"),
	} {
		if !check {
			t.Error(name + ": not so in the served file")
		}
	}
}
