package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

const adminToken = "admin-token-0123456789abcdef0123456789abcdef"

// adminRig is the admin listener (request ids, token check, read-only
// guard, queue UI) over the test Redis, with one task in queue "default".
type adminRig struct {
	srv       *httptest.Server
	inspector *asynq.Inspector
}

func newAdminRig(t *testing.T) adminRig {
	t.Helper()
	rdb := testenv.NewRedis(t, testenv.RedisDBCmd)
	client := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { client.Close() })
	if _, err := client.Enqueue(asynq.NewTask("test:noop", nil), asynq.Queue("default")); err != nil {
		t.Fatal(err)
	}
	inspector := asynq.NewInspectorFromRedisClient(rdb)
	t.Cleanup(func() { inspector.Close() })
	srv := httptest.NewServer(withRequestID(adminHandler(rdb, adminToken)))
	t.Cleanup(srv.Close)
	return adminRig{srv: srv, inspector: inspector}
}

// authFn sets a request's credentials.
type authFn func(r *http.Request)

func bearer(token string) authFn {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
}

func basic(user, password string) authFn {
	return func(r *http.Request) { r.SetBasicAuth(user, password) }
}

func (a adminRig) do(t *testing.T, method, path string, auth authFn) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, a.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != nil {
		auth(req)
	}
	resp, err := a.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

type errorBody struct {
	Error struct {
		Code      string `json:"code"`
		Message   string `json:"message"`
		RequestID string `json:"request_id"`
	} `json:"error"`
}

// checkError asserts an error answer: status, Content-Type, the error body
// with code and the X-Request-Id of the answer, and no leak of the token.
func checkError(t *testing.T, resp *http.Response, body []byte, status int, code string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d; body %s", resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("Content-Type %q, want application/json; charset=utf-8", ct)
	}
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("body is not the JSON error body: %v: %s", err, body)
	}
	if e.Error.Code != code || e.Error.Message == "" {
		t.Errorf("error code %q message %q, want code %q and a message", e.Error.Code, e.Error.Message, code)
	}
	if id := resp.Header.Get("X-Request-Id"); id == "" || e.Error.RequestID != id {
		t.Errorf("request_id %q, X-Request-Id %q; want the same, not empty", e.Error.RequestID, id)
	}
	if strings.Contains(string(body), adminToken) {
		t.Errorf("the error body holds the admin token: %s", body)
	}
}

// TestAdminRefusesWithoutTheToken: every request without the right token,
// whatever its method, is answered 401 with a Basic challenge (so a browser
// asks for it) and the JSON error body.
func TestAdminRefusesWithoutTheToken(t *testing.T) {
	a := newAdminRig(t)
	cases := []struct {
		name   string
		method string
		path   string
		auth   authFn
	}{
		{"no credentials", http.MethodGet, "/", nil},
		{"no credentials, API", http.MethodGet, "/api/queues", nil},
		{"wrong bearer token", http.MethodGet, "/api/queues", bearer("admin-token-0123456789abcdef0123456789abcdeX")},
		{"empty bearer token", http.MethodGet, "/api/queues", bearer("")},
		{"token as a prefix of another", http.MethodGet, "/api/queues", bearer(adminToken + "x")},
		{"wrong Basic password", http.MethodGet, "/", basic("admin", "wrong")},
		{"token as the Basic user name", http.MethodGet, "/", basic(adminToken, "")},
		{"other scheme", http.MethodGet, "/api/queues", func(r *http.Request) { r.Header.Set("Authorization", "Token "+adminToken) }},
		{"DELETE without credentials", http.MethodDelete, "/api/queues/default", nil},
		{"POST with a wrong token", http.MethodPost, "/api/queues/default:pause", bearer("wrong")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := a.do(t, c.method, c.path, c.auth)
			checkError(t, resp, body, http.StatusUnauthorized, "unauthorized")
			if got, want := resp.Header.Get("WWW-Authenticate"), `Basic realm="gatehouse-admin", charset="UTF-8"`; got != want {
				t.Errorf("WWW-Authenticate %q, want %q", got, want)
			}
		})
	}
	assertQueueUntouched(t, a.inspector)
}

// TestAdminServesTheUIWithTheToken: with the token as a bearer token or as
// a Basic password (any user name) the queue UI and its API answer.
func TestAdminServesTheUIWithTheToken(t *testing.T) {
	a := newAdminRig(t)
	for _, c := range []struct {
		name string
		auth authFn
	}{
		{"bearer", bearer(adminToken)},
		{"basic", basic("ops", adminToken)},
		{"basic, empty user name", basic("", adminToken)},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := a.do(t, http.MethodGet, "/", c.auth)
			if resp.StatusCode != http.StatusOK || !strings.Contains(strings.ToLower(string(body)), "<html") {
				t.Errorf("GET /: %d, body starts %.80q; want 200 and the UI's page", resp.StatusCode, body)
			}
			resp, body = a.do(t, http.MethodGet, "/api/queues", c.auth)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /api/queues: %d, want 200; body %s", resp.StatusCode, body)
			}
			var list struct {
				Queues []struct {
					Queue  string `json:"queue"`
					Size   int    `json:"size"`
					Paused bool   `json:"paused"`
				} `json:"queues"`
			}
			if err := json.Unmarshal(body, &list); err != nil {
				t.Fatalf("GET /api/queues: %v: %s", err, body)
			}
			type q struct {
				Queue  string
				Size   int
				Paused bool
			}
			var got []q
			for _, x := range list.Queues {
				got = append(got, q{x.Queue, x.Size, x.Paused})
			}
			if diff := cmp.Diff([]q{{"default", 1, false}}, got); diff != "" {
				t.Errorf("GET /api/queues (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAdminIsReadOnly: with the right token, every method but GET and HEAD
// is refused 405 before it reaches the UI, and the queue stays as it was.
func TestAdminIsReadOnly(t *testing.T) {
	a := newAdminRig(t)
	cases := []struct {
		method, path string
	}{
		{http.MethodDelete, "/api/queues/default"},
		{http.MethodPost, "/api/queues/default:pause"},
		{http.MethodDelete, "/api/queues/default/pending_tasks:delete_all"},
		{http.MethodPost, "/api/queues/default/pending_tasks:archive_all"},
		{http.MethodPut, "/api/queues/default"},
		{http.MethodPatch, "/api/queues/default"},
	}
	for _, c := range cases {
		for _, auth := range []struct {
			name string
			set  authFn
		}{{"bearer", bearer(adminToken)}, {"basic", basic("ops", adminToken)}} {
			t.Run(c.method+" "+c.path+" "+auth.name, func(t *testing.T) {
				resp, body := a.do(t, c.method, c.path, auth.set)
				checkError(t, resp, body, http.StatusMethodNotAllowed, "method_not_allowed")
				if got := resp.Header.Get("Allow"); got != "GET, HEAD" {
					t.Errorf("Allow %q, want GET, HEAD", got)
				}
			})
		}
	}
	assertQueueUntouched(t, a.inspector)

	// HEAD passes the guard.
	if resp, _ := a.do(t, http.MethodHead, "/", bearer(adminToken)); resp.StatusCode == http.StatusMethodNotAllowed || resp.StatusCode == http.StatusUnauthorized {
		t.Errorf("HEAD / with the token: %d, want it let through", resp.StatusCode)
	}
}

// assertQueueUntouched checks that queue "default" still exists, is not
// paused and still holds its pending task.
func assertQueueUntouched(t *testing.T, inspector *asynq.Inspector) {
	t.Helper()
	info, err := inspector.GetQueueInfo("default")
	if err != nil {
		t.Fatalf("queue default: %v (deleted?)", err)
	}
	if info.Paused || info.Pending != 1 || info.Archived != 0 {
		t.Errorf("queue default: paused %v, %d pending, %d archived; want not paused, 1 pending, 0 archived",
			info.Paused, info.Pending, info.Archived)
	}
}
