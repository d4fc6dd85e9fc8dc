package e2e

import (
	"bytes"
	"net/http"
	"testing"
)

// TestIdempotentCreationAcrossReplicas: a webhook endpoint created with an
// Idempotency-Key on one replica is replayed byte for byte, secret included,
// by the other; an API key's repeat names the same key without its secret.
// The stack's secret scan (pg_dump, logs, Redis) then finds no whsec_ or
// sk_test_ in clear: the stored answer is sealed.
func TestIdempotentCreationAcrossReplicas(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{}, "idempotent endpoint and key creation")
	c := newClient(t, "127.0.0.1")
	_, token := st.signUp(t, c, "idem", "Idem Shop")
	key := st.newKey(t, c, token, "idem")

	body := `{"url":"https://hooks.example.com/idem","events":["charge.captured"]}`
	var answers []exchange
	for _, base := range st.replicas {
		e, err := sendWith(c, http.MethodPost, base+"/v1/me/webhook_endpoints", key.SecretKey, body, "Idempotency-Key", "endpoint-e2e-1")
		if err != nil {
			t.Fatal(err)
		}
		st.check(t, e)
		mustExpect(t, e, http.StatusCreated, "")
		answers = append(answers, e)
	}
	if !bytes.Equal(answers[0].body, answers[1].body) || answers[1].header("Idempotent-Replayed") != "true" {
		t.Fatalf("replay on replica 2 differs or is unmarked:\n%s\n%s", answers[0].body, answers[1].body)
	}
	list := st.do(t, c, http.MethodGet, st.replicas[0]+"/v1/me/webhook_endpoints", key.SecretKey, "")
	var endpoints struct {
		Data []map[string]any `json:"data"`
	}
	decode(t, list, &endpoints)
	if len(endpoints.Data) != 1 {
		t.Errorf("%d endpoints after a replay, want 1", len(endpoints.Data))
	}

	var keys []apiKey
	for _, base := range st.replicas {
		e, err := sendWith(c, http.MethodPost, base+"/v1/me/api_keys", token, `{"name":"ci"}`, "Idempotency-Key", "key-e2e-1")
		if err != nil {
			t.Fatal(err)
		}
		st.check(t, e)
		mustExpect(t, e, http.StatusCreated, "")
		var k apiKey
		decode(t, e, &k)
		keys = append(keys, k)
	}
	if keys[0].ID != keys[1].ID || keys[0].SecretKey == "" || keys[1].SecretKey != "" {
		t.Errorf("API key replay: first %s (secret %t), repeat %s (secret %t); want one id, the secret only first",
			keys[0].ID, keys[0].SecretKey != "", keys[1].ID, keys[1].SecretKey != "")
	}
}
