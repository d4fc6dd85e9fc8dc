package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestAuditVerify is `api audit verify` (docs/audit.md) on the real
// binaries: intact after customers' creation and a key's revocation
// through both replicas (charges made with a key are payment traffic and
// not audit-logged: 20 of them add no entry), then failing, naming the merchant, chain and seq, once an entry
// is changed behind the triggers' back (as a superuser can) and once a
// middle entry is deleted.
func TestAuditVerify(t *testing.T) {
	parallel(t)
	st := newStack(t, stackOptions{}, "the audit log's chain")
	c := newClient(t, "127.0.0.1")
	merchantID, token := st.signUp(t, c, "audit", "Audit")
	key := st.newKey(t, c, token, "audit")
	other := st.newKey(t, c, token, "other")
	for i := range 20 {
		mustExpect(t, st.do(t, c, http.MethodPost, st.replicas[i%2]+"/v1/charges", key.SecretKey, chargeBody), http.StatusCreated, "")
		body := fmt.Sprintf(`{"name":"Customer %d"}`, i)
		mustExpect(t, st.do(t, c, http.MethodPost, st.replicas[(i+1)%2]+"/v1/customers", key.SecretKey, body), http.StatusCreated, "")
	}
	mustExpect(t, st.do(t, c, http.MethodDelete, st.replicas[0]+"/v1/me/api_keys/"+other.ID, key.SecretKey, ""), http.StatusOK, "")
	log := st.do(t, c, http.MethodGet, st.replicas[1]+"/v1/audit_log?action=api_key.revoke", token, "")
	mustExpect(t, log, http.StatusOK, "")
	if !strings.Contains(string(log.body), other.ID) || !strings.Contains(string(log.body), key.ID) {
		t.Fatalf("the revocation's entry: %s", log.body)
	}

	verify := func() (string, int) {
		t.Helper()
		cmd := exec.Command(st.bins.api, "audit", "verify")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "DATABASE_URL=" + st.db.URL}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return out.String(), cmd.ProcessState.ExitCode()
	}
	out, code := verify()
	if code != 0 || !strings.Contains(out, "24 entries") || !strings.Contains(out, "intact") {
		t.Fatalf("verify on an intact log: exit %d\n%s", code, out)
	}

	ctx := context.Background()
	tamper := func(q string, args ...any) {
		t.Helper()
		conn, err := st.db.Pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, q, args...); err == nil {
			t.Fatalf("%s accepted with the triggers on", q)
		}
		if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
			t.Fatal(err)
		}
		defer conn.Exec(ctx, `SET session_replication_role = DEFAULT`) //nolint:errcheck
		if tag, err := conn.Exec(ctx, q, args...); err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("%s: %v %v", q, tag, err)
		}
	}
	// A middle entry: one of a chain with at least three (20 customers and
	// three key actions over eight chains make one).
	var chain int
	var seq int64
	if err := st.db.Pool.QueryRow(ctx, `SELECT chain, max(seq) - 1 FROM audit_log WHERE merchant_id = $1
		GROUP BY chain HAVING count(*) >= 3 ORDER BY chain LIMIT 1`, merchantID).Scan(&chain, &seq); err != nil {
		t.Fatal(err)
	}
	where := `merchant_id = $1 AND chain = $2 AND seq = $3`
	tamper(`UPDATE audit_log SET ip = '203.0.113.66' WHERE `+where, merchantID, chain, seq)
	out, code = verify()
	want := fmt.Sprintf("merchant %s chain %d seq %d", merchantID, chain, seq)
	if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "changed") {
		t.Fatalf("verify after changing an entry: exit %d, want 1 naming %q\n%s", code, want, out)
	}
	tamper(`DELETE FROM audit_log WHERE `+where, merchantID, chain, seq)
	out, code = verify()
	if code != 1 || !strings.Contains(out, want) || !strings.Contains(out, "missing") {
		t.Fatalf("verify after deleting an entry: exit %d, want 1 naming %q\n%s", code, want, out)
	}
}
