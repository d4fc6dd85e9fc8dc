package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestWebhookEndpointHealth is endpoint health (docs/webhooks.md) against the
// real binaries, with WEBHOOK_DISABLE_AFTER=1s: a receiver answering 410 Gone
// has its endpoint disabled at its first answer; one answering 500 is
// disabled once its attempts have failed for a second; a disabled endpoint is
// sent nothing and its deliveries wait, failed, in the log; the worker counts
// both in gatehouse_webhook_endpoints_disabled_total; enabled again, a
// recover sends everything it missed.
func TestWebhookEndpointHealth(t *testing.T) {
	parallel(t)
	const disableAfter = time.Second
	st := newStack(t, stackOptions{env: webhooksStackEnv, workerEnv: append(webhooksWorkerEnv, "WEBHOOK_DISABLE_AFTER="+disableAfter.String())},
		"WEBHOOK_DISABLE_AFTER="+disableAfter.String())
	bag := &secretBag{}
	m := newWebhookMerchant(t, st, bag, "127.0.0.41", "health")
	gone := newReceiver(t, "gone", always(http.StatusGone))
	failing := newReceiver(t, "failing", always(http.StatusInternalServerError))
	g, _ := m.endpoint(t, gone.url(), "charge.created")
	f, _ := m.endpoint(t, failing.url(), "charge.created")
	get := func(id string) endpointJSON {
		t.Helper()
		e := m.do(t, http.MethodGet, "/v1/me/webhook_endpoints/"+id, "")
		mustExpect(t, e, http.StatusOK, "")
		var out endpointJSON
		decode(t, e, &out)
		if out.Active != (out.Status == "enabled") || (out.DisabledReason == nil) != out.Active || (out.DisabledAt == nil) != out.Active {
			t.Errorf("endpoint %s: active %v, status %s, reason %v, disabled_at %v", id, out.Active, out.Status, out.DisabledReason, out.DisabledAt)
		}
		return out
	}
	reason := func(e endpointJSON) string {
		if e.DisabledReason == nil {
			return ""
		}
		return *e.DisabledReason
	}
	waitReason := func(id, want string, within time.Duration) time.Duration {
		t.Helper()
		within = patience(within)
		start := time.Now()
		for {
			e := get(id)
			if e.Status == "disabled" && reason(e) == want {
				return time.Since(start)
			}
			if time.Since(start) > within {
				t.Fatalf("endpoint %s: %s %q after %s, want disabled %q", id, e.Status, reason(e), within, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	began := time.Now()
	m.charge(t, "health-1")
	tookGone := waitReason(g.ID, "gone", 10*time.Second)
	waitReason(f.ID, "failing", 15*time.Second)
	t.Logf("disabled: gone %s after the charge (1 attempt); failing %s after it (WEBHOOK_DISABLE_AFTER %s)",
		tookGone.Round(time.Millisecond), time.Since(began).Round(time.Millisecond), disableAfter)
	if n := gone.count(); n != 1 {
		t.Errorf("the 410 receiver got %d requests, want 1", n)
	}
	// The failing endpoint's delivery failed for good when it was disabled.
	m.waitDeliveries(t, f.ID, 1, isStatus("failed"), 10*time.Second)

	// Disabled: sent nothing, the next event's deliveries wait, failed.
	goneHits, failingHits := gone.count(), failing.count()
	m.charge(t, "health-2")
	for _, ep := range []string{g.ID, f.ID} {
		ds := m.waitDeliveries(t, ep, 2, isStatus("failed"), 10*time.Second)
		newest := 0
		for _, d := range ds {
			if len(d.Attempts) == 0 {
				newest++
			}
		}
		if newest != 1 {
			t.Errorf("endpoint %s: %d deliveries without an attempt, want the newest one", ep, newest)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if gone.count() != goneHits || failing.count() != failingHits {
		t.Errorf("disabled endpoints were sent %d and %d more requests", gone.count()-goneHits, failing.count()-failingHits)
	}

	// The worker counted both.
	c := newClient(t, "127.0.0.41")
	metrics := string(st.do(t, c, http.MethodGet, st.worker+"/metrics", "", "").body)
	for _, r := range []string{"gone", "failing"} {
		if v := metricValue(metrics, `gatehouse_webhook_endpoints_disabled_total{reason="`+r+`"}`); v != 1 {
			t.Errorf("gatehouse_webhook_endpoints_disabled_total{reason=%q} = %v, want 1", r, v)
		}
	}

	// Enabled again, with a working receiver: a recover sends both events.
	gone.setRespond(always(http.StatusOK))
	e := m.do(t, http.MethodPatch, "/v1/me/webhook_endpoints/"+g.ID, `{"active":true}`)
	mustExpect(t, e, http.StatusOK, "")
	if got := get(g.ID); got.Status != "enabled" {
		t.Fatalf("enabled again: %+v", got)
	}
	e = m.do(t, http.MethodPost, "/v1/me/webhook_endpoints/"+g.ID+"/recover",
		fmt.Sprintf(`{"since":%q}`, began.Add(-time.Minute).UTC().Format(time.RFC3339Nano)))
	mustExpect(t, e, http.StatusOK, "")
	if !strings.Contains(string(e.body), `"count":2`) {
		t.Fatalf("recover: %s", e.body)
	}
	m.waitDeliveries(t, g.ID, 2, isStatus("succeeded"), 15*time.Second)
	if n := gone.count(); n != goneHits+2 {
		t.Errorf("after recover the receiver got %d more requests, want 2", n-goneHits)
	}
	checkNoWebhookSecrets(t, st, bag.all())
}

// metricValue is the value of one series in a /metrics text, or -1.
func metricValue(text, series string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, series+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(line[len(series):]), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}
