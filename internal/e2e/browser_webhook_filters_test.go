package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// webhookFiltersJourney is what webhook_filters.mjs saw.
type webhookFiltersJourney struct {
	journeyRun
	Refused struct {
		Status      int    `json:"status"`
		Message     string `json:"message"`
		FieldError  string `json:"fieldError"`
		Kept        string `json:"kept"`
		Invalid     string `json:"invalid"`
		AfterReload string `json:"afterReload"`
	} `json:"refused"`
	Saved struct {
		Notice string `json:"notice"`
		Shown  string `json:"shown"`
		Fits   bool   `json:"fits"`
	} `json:"saved"`
	Counts struct {
		Delivered string `json:"delivered"`
		Filtered  string `json:"filtered"`
		Failed    string `json:"failed"`
		Pending   string `json:"pending"`
		Reloads   int    `json:"reloads"`
	} `json:"counts"`
	Log struct {
		Selected   string `json:"selected"`
		Deliveries []struct {
			Status   string `json:"status"`
			Type     string `json:"type"`
			Says     string `json:"says"`
			Attempts int    `json:"attempts"`
		} `json:"deliveries"`
	} `json:"log"`
	Cleared struct {
		Notice string `json:"notice"`
		Shown  string `json:"shown"`
	} `json:"cleared"`
}

// checkpoints serves a journey's pauses: the script GETs /<name> and waits
// while the test checks the stack or acts on it. The answer is 204, or 500
// with what went wrong, which stops the journey. Each runs once.
func checkpoints(t *testing.T, at map[string]func() error) string {
	t.Helper()
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		name := strings.TrimPrefix(r.URL.Path, "/")
		f, ok := at[name]
		if !ok {
			http.Error(w, "no checkpoint "+name+" (or it ran already)", http.StatusNotFound)
			return
		}
		delete(at, name)
		if err := f(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestBrowserWebhookFilters is an endpoint's filter on the dashboard in
// Debian's chromium against the real binaries (webhook_filters.mjs). On
// the page of an endpoint subscribed to charge.created, a filter with an
// unknown operator is refused next to the textarea, naming its path, with
// what was typed kept, and the endpoint through the API is as it was; a
// good one (amount at least 1000) is saved and shown. Charges of 500 and
// 1500 then make one delivery and one filtered: the counts on the page
// show them, the log filtered by "filtered" lists the one turned away
// (never sent), and the receiver got only the other. Emptied, the filter
// is null through the API.
func TestBrowserWebhookFilters(t *testing.T) {
	parallel(t)
	dir, chromium := browserTools(t)
	shots := screenshotDir(t)
	st := newStack(t, stackOptions{env: webhooksStackEnv, workerEnv: webhooksWorkerEnv}, "browser webhook filters")
	c := newClient(t, "127.0.0.47")
	email, password := "filters-"+harness.RandomHex(4)+"@example.com", "correct horse "+harness.RandomHex(8)
	merchantID := st.createMerchant(t, email, password, "Filter Shop")
	token := st.sessionToken(t, c, email, password)
	bag := &secretBag{}
	m := &whMerchant{payments: &payments{st: st, c: c, key: st.newKey(t, c, token, "filters").SecretKey}, id: merchantID, secrets: bag}
	recv := newReceiver(t, "filters", always(http.StatusOK))
	ep, _ := m.endpoint(t, recv.url(), "charge.created")

	// endpoint is the endpoint through the API; errors, not t.Fatal, for
	// the checkpoints' goroutines.
	endpoint := func() ([]byte, error) {
		e, err := send(c, http.MethodGet, st.replicas[0]+"/v1/me/webhook_endpoints/"+ep.ID, m.key, "")
		if err != nil {
			return nil, err
		}
		if e.status() != http.StatusOK {
			return nil, fmt.Errorf("%s: %s", e.describe(), e)
		}
		return e.body, nil
	}
	filterOf := func(body []byte) string {
		var v struct {
			Filter json.RawMessage `json:"filter"`
		}
		if json.Unmarshal(body, &v) != nil || v.Filter == nil {
			return "(no filter field)"
		}
		return string(v.Filter)
	}
	created, err := endpoint()
	if err != nil {
		t.Fatal(err)
	}
	if f := filterOf(created); f != "null" {
		t.Fatalf("a new endpoint's filter: %s, want null", f)
	}

	const bad = `{"data.charge.amount": {"$gt_eq": 1000}}`
	const good = `{"data.charge.amount": {"$gte": 1000}}`
	var mu sync.Mutex // charged is written by a checkpoint
	charged := map[int64]string{}
	url := checkpoints(t, map[string]func() error{
		// The refused filter changed nothing: the endpoint is byte for
		// byte as created (its updated_at included).
		"refused": func() error {
			now, err := endpoint()
			if err != nil {
				return err
			}
			if string(now) != string(created) {
				return fmt.Errorf("after the refused filter the endpoint is %s, was %s", now, created)
			}
			return nil
		},
		// The good filter is stored; then one charge it lets through and
		// one it turns away.
		"saved": func() error {
			now, err := endpoint()
			if err != nil {
				return err
			}
			if f := filterOf(now); !sameJSON([]byte(f), []byte(good)) {
				return fmt.Errorf("after saving, the API shows filter %s, want %s", f, good)
			}
			for _, amount := range []int64{500, 1500} {
				e, err := send(c, http.MethodPost, st.replicas[amount/1000%2]+"/v1/charges", m.key,
					cardBody("4242424242424242", false, amount, "filters"))
				if err != nil {
					return err
				}
				var ch chargeJSON
				if e.status() != http.StatusCreated || json.Unmarshal(e.body, &ch) != nil {
					return fmt.Errorf("a charge of %d: %s", amount, e)
				}
				mu.Lock()
				charged[amount] = ch.ID
				mu.Unlock()
			}
			return nil
		},
	})

	cfg := map[string]string{"api": st.replicas[0], "email": email, "password": password, "shots": shots,
		"endpoint": ep.ID, "checkpoints": url, "bad": bad, "good": good}
	got := journey[webhookFiltersJourney](t, dir, chromium, "webhook_filters.mjs", cfg, 3*time.Minute)
	t.Logf("webhook filters journey in chromium: %d ms; steps (ms): %v; %d reloads for the counts; screenshots in %s",
		got.TookMS, got.Steps, got.Counts.Reloads, shots)

	// The refused filter: 400, the path named next to the textarea, what
	// was typed kept; nothing stored (the checkpoint, and the page
	// reloaded shows no filter).
	r := got.Refused
	if r.Status != http.StatusBadRequest || !strings.Contains(r.FieldError, "filter.data.charge.amount") ||
		!strings.Contains(r.FieldError, `unknown operator "$gt_eq"`) || !strings.Contains(r.Message, `"data.charge.amount"`) ||
		r.Kept != bad || r.Invalid != "true" || r.AfterReload != "" {
		t.Errorf("the refused filter: %+v", r)
	}
	// The good one, shown as stored, every line of it in view.
	if got.Saved.Notice != "Endpoint saved." || !sameJSON([]byte(got.Saved.Shown), []byte(good)) || !got.Saved.Fits {
		t.Errorf("the saved filter: notice %q, shown %q (all lines in view: %v)", got.Saved.Notice, got.Saved.Shown, got.Saved.Fits)
	}
	// The counts and the log: one delivered, one filtered and never sent.
	if n := got.Counts; n.Delivered != "1" || n.Filtered != "1" || n.Failed != "0" || n.Pending != "0" {
		t.Errorf("the counts on the page: %+v", n)
	}
	if l := got.Log; l.Selected != "filtered" || len(l.Deliveries) != 1 || l.Deliveries[0].Status != "filtered" ||
		l.Deliveries[0].Type != "charge.created" || l.Deliveries[0].Attempts != 0 ||
		!strings.Contains(l.Deliveries[0].Says, "turned this event away") {
		t.Errorf("the log filtered by status filtered: %+v", l)
	}
	// Emptied: no filter.
	if got.Cleared.Shown != "" || got.Cleared.Notice != "Endpoint saved." {
		t.Errorf("the cleared filter: %+v", got.Cleared)
	}
	after, err := endpoint()
	if err != nil {
		t.Fatal(err)
	}
	if f := filterOf(after); f != "null" {
		t.Errorf("after emptying the textarea, the API shows filter %s, want null", f)
	}

	// The receiver got the 1500 charge's charge.created only, and the API
	// counts the same as the page.
	var sent []string
	for _, h := range recv.all() {
		var ev struct {
			Data struct {
				Charge struct {
					ID     string `json:"id"`
					Amount int64  `json:"amount"`
				} `json:"charge"`
			} `json:"data"`
		}
		if err := json.Unmarshal(h.body, &ev); err != nil {
			t.Errorf("a delivery's body: %v", err)
		}
		sent = append(sent, h.header.Get("X-Service-Event-Type")+" "+ev.Data.Charge.ID)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(charged) != 2 || len(sent) != 1 || sent[0] != "charge.created "+charged[1500] {
		t.Errorf("the receiver got %v; want charge.created of %s only (charges %v)", sent, charged[1500], charged)
	}
	e := m.do(t, http.MethodGet, "/v1/me/webhook_endpoints/"+ep.ID+"/stats", "")
	mustExpect(t, e, http.StatusOK, "")
	var stats struct {
		Delivered int64 `json:"delivered"`
		Filtered  int64 `json:"filtered"`
		Failed    int64 `json:"failed"`
		Pending   int64 `json:"pending"`
	}
	decode(t, e, &stats)
	if stats.Delivered != 1 || stats.Filtered != 1 || stats.Failed != 0 || stats.Pending != 0 {
		t.Errorf("the endpoint's stats through the API: %+v", stats)
	}
	// Two changes by the member (saved, emptied), none for the refusal.
	if n := queryInt(t, st.db, `SELECT count(*) FROM audit_log WHERE merchant_id = $1 AND action = 'webhook_endpoint.update'
		AND object_id = $2 AND actor_type = 'member'`, merchantID, ep.ID); n != 2 {
		t.Errorf("%d audit log entries of the endpoint's changes, want 2", n)
	}
	for _, name := range []string{"webhook-filter-refused", "webhook-filter-saved", "webhook-filter-log"} {
		if fi, err := os.Stat(filepath.Join(shots, name+".png")); err != nil || fi.Size() < 1000 {
			t.Errorf("screenshot %s: %v", name, err)
		}
	}
	checkNoWebhookSecrets(t, st, bag.all())
}
