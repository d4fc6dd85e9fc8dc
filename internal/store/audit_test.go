package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gatehouse-pay/gatehouse/internal/apikeys"
	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// auditCtx carries the audit record of a request of merchantID.
func auditCtx(merchantID, action string) context.Context {
	return audit.WithRecord(context.Background(), audit.NewRecord(audit.Entry{ID: ids.New("al"), MerchantID: merchantID,
		ActorType: audit.ActorAPIKey, ActorID: "key_test", Action: action, ObjectType: "thing", IP: "192.0.2.7",
		UserAgent: "test-agent/1 é", RequestID: "req-" + ids.NewUUID()}))
}

func auditEntries(t *testing.T, s *store.Store, merchantID string, f audit.Filter) []audit.Entry {
	t.Helper()
	page, err := s.ListAudit(context.Background(), merchantID, f, listing.Params{Limit: listing.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	return page.Items
}

func mustVerify(t *testing.T, s *store.Store) audit.Summary {
	t.Helper()
	sum, err := s.VerifyAudit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Broken) != 0 {
		t.Fatalf("verify: %+v", sum.Broken)
	}
	return sum
}

func newCharge(t testing.TB, merchantID string) charges.NewCharge {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	c := charges.Charge{ID: ids.NewUUID(), MerchantID: merchantID, Environment: "sandbox", Amount: 2000, Currency: "USD",
		Status: charges.StatusCreated, PaymentMethod: "card", Capture: true, Provider: "sandbox", Metadata: map[string]string{},
		CreatedAt: now, UpdatedAt: now}
	c.Card.Brand, c.Card.Last4 = "visa", ptr("4242")
	ev, err := events.New(ids.NewUUID(), merchantID, c.Environment, events.ChargeCreated, now, c.View(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return charges.NewCharge{Charge: c, Sealed: []byte("sealed card"), Event: ev, Task: outbox.Task{Type: outbox.ChargeAuthorize, RefID: c.ID},
		Response: &idempotency.Response{Status: 201, Body: []byte(`{}`)}}
}

func TestAuditEntryIsWrittenWithItsAction(t *testing.T) {
	s := newStore(t)
	m := newMerchant(t, s, "audit@example.com")

	// A charge: the entry is in the charge's own statement, naming it.
	ctx := auditCtx(m.ID, "charge.create")
	n := newCharge(t, m.ID)
	if _, _, err := s.CreateCharge(ctx, n); err != nil {
		t.Fatal(err)
	}
	if !audit.FromContext(ctx).Written() {
		t.Fatal("the charge's record is not written")
	}
	got := auditEntries(t, s, m.ID, audit.Filter{})
	if len(got) != 1 || got[0].Action != "charge.create" || got[0].ObjectType != "charge" || got[0].ObjectID != n.Charge.ID ||
		got[0].IP != "192.0.2.7" || got[0].UserAgent != "test-agent/1 é" || got[0].Seq != 1 {
		t.Fatalf("entries %+v", got)
	}
	// The database's hash is the domain's.
	if e := got[0]; string(e.ComputeHash()) != string(e.Hash) || string(e.PrevHash) != string(audit.Genesis) {
		t.Fatalf("hash of %+v is not SHA-256 over the genesis and the encoding", e)
	}

	// A replay of an Idempotency-Key writes nothing new.
	idem := &idempotency.Request{Key: "k1", Fingerprint: []byte("fp")}
	first := newCharge(t, m.ID)
	first.Idem = idem
	if _, _, err := s.CreateCharge(auditCtx(m.ID, "charge.create"), first); err != nil {
		t.Fatal(err)
	}
	again := newCharge(t, m.ID)
	again.Idem = idem
	ctx = auditCtx(m.ID, "charge.create")
	replay, _, err := s.CreateCharge(ctx, again)
	if err != nil || replay == nil {
		t.Fatalf("replay: %v %v", replay, err)
	}
	if audit.FromContext(ctx).Written() || audit.Pending(ctx) {
		t.Fatal("a replay is audited")
	}
	if err := s.AppendAudit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := auditEntries(t, s, m.ID, audit.Filter{}); len(got) != 2 {
		t.Fatalf("%d entries after a replay, want 2", len(got))
	}

	// A single-statement write (a key's revocation) runs in a transaction
	// with its entry; one that fails leaves none.
	k := apikeys.Key{ID: ids.New("key"), MerchantID: m.ID, Name: "k", Environment: "sandbox", PublicKey: "pk_test_" + ids.NewUUID(),
		SecretDigest: []byte(ids.NewUUID()), SecretLast4: "abcd", CreatedAt: time.Now().UTC()}
	ctx = auditCtx(m.ID, "api_key.create")
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	ctx = audit.WithRecord(context.Background(), audit.NewRecord(audit.Entry{ID: ids.New("al"), MerchantID: m.ID,
		ActorType: audit.ActorMember, ActorID: "mem_1", Action: "api_key.revoke", ObjectType: "api_key", ObjectID: k.ID}))
	if _, err := s.RevokeKey(ctx, m.ID, k.ID); err != nil {
		t.Fatal(err)
	}
	missing := auditCtx(m.ID, "api_key.revoke")
	if _, err := s.RevokeKey(missing, m.ID, "key_missing"); apperr.KindOf(err) != apperr.KindNotFound {
		t.Fatalf("revoke missing: %v", err)
	}
	if !audit.Pending(missing) {
		t.Fatal("a failed action's record is not pending any more")
	}
	got = auditEntries(t, s, m.ID, audit.Filter{ObjectID: k.ID})
	if len(got) != 2 || got[0].Action != "api_key.revoke" || got[0].ActorID != "mem_1" || got[1].Action != "api_key.create" {
		t.Fatalf("the key's entries: %+v", got)
	}
	if got := auditEntries(t, s, m.ID, audit.Filter{Action: "api_key.revoke", Actor: "mem_1"}); len(got) != 1 {
		t.Fatalf("by action and actor: %+v", got)
	}
	future := time.Now().Add(time.Hour)
	if got := auditEntries(t, s, m.ID, audit.Filter{CreatedGTE: &future}); len(got) != 0 {
		t.Fatalf("created after an hour from now: %+v", got)
	}
	if got := auditEntries(t, s, newMerchant(t, s, "other@example.com").ID, audit.Filter{}); len(got) != 0 {
		t.Fatalf("another merchant sees %+v", got)
	}
	mustVerify(t, s)
}

func TestAuditLogRefusesUpdateDeleteTruncate(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	m := newMerchant(t, s, "append@example.com")
	if err := s.AppendAudit(auditCtx(m.ID, "thing.create")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, q := range []string{
		`UPDATE audit_log SET ip = '203.0.113.1'`,
		`DELETE FROM audit_log`,
		`TRUNCATE audit_log`,
		`TRUNCATE audit_log_default`,
		`UPDATE audit_anchors SET seq = 0`,
		`DELETE FROM audit_anchors`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want it refused", q, err)
		}
	}
	var partition string
	if err := db.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM audit_log`).Scan(&partition); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `TRUNCATE `+partition); err == nil {
		t.Errorf("TRUNCATE %s accepted", partition)
	}
	if got := auditEntries(t, s, m.ID, audit.Filter{}); len(got) != 1 {
		t.Fatalf("entries %d, want 1", len(got))
	}
}

// tamper runs q with the triggers off, as a superuser can.
func tamper(t *testing.T, pool *pgxpool.Pool, q string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `SET session_replication_role = DEFAULT`) //nolint:errcheck
	if tag, err := conn.Exec(ctx, q, args...); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("%s: %v %v", q, tag, err)
	}
}

func TestVerifyFindsTampering(t *testing.T) {
	for _, c := range []struct {
		name   string
		q      string
		atSeq  int64 // of the entry tampered with
		broken int64 // the seq verify names
	}{
		{"changed", `UPDATE audit_log SET actor_id = 'mem_someone_else' WHERE merchant_id = $1 AND chain = $2 AND seq = $3`, 3, 3},
		{"deleted middle", `DELETE FROM audit_log WHERE merchant_id = $1 AND chain = $2 AND seq = $3`, 3, 3},
		{"deleted last", `DELETE FROM audit_log WHERE merchant_id = $1 AND chain = $2 AND seq = $3`, 5, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := testenv.NewDB(t)
			s := store.New(db.Pool)
			m := newMerchant(t, s, "tamper@example.com")
			ctx := context.Background()
			for i := 0; i < 5; i++ {
				if _, err := db.Pool.Exec(ctx, `SELECT audit_append($1, $2, 0, 'api_key', 'key_1', 'charge.create', 'charge', $3, '192.0.2.1', 'ua', 'req')`,
					ids.New("al"), m.ID, fmt.Sprint(i)); err != nil {
					t.Fatal(err)
				}
			}
			mustVerify(t, s)
			tamper(t, db.Pool, c.q, m.ID, 0, c.atSeq)
			sum, err := s.VerifyAudit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(sum.Broken) != 1 || sum.Broken[0].MerchantID != m.ID || sum.Broken[0].Chain != 0 || sum.Broken[0].Seq != c.broken {
				t.Fatalf("verify: %+v, want merchant %s chain 0 seq %d", sum.Broken, m.ID, c.broken)
			}
		})
	}
}

func TestAuditChainUnderConcurrentWriters(t *testing.T) {
	s := newStore(t)
	m := newMerchant(t, s, "busy@example.com")
	const writers, each = 16, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				n := newCharge(t, m.ID)
				if _, _, err := s.CreateCharge(auditCtx(m.ID, "charge.create"), n); err != nil {
					errs <- err
				}
				if err := s.AppendAudit(auditCtx(m.ID, "webhook_endpoint.test")); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sum := mustVerify(t, s)
	if sum.Entries != 2*writers*each {
		t.Fatalf("%d entries, want %d", sum.Entries, 2*writers*each)
	}
}

func TestAuditRetentionDropsOldMonthsAndKeepsTheChainChecked(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	m := newMerchant(t, s, "retention@example.com")
	ctx := context.Background()
	now := time.Now().UTC()
	old := time.Date(now.Year(), now.Month(), 1, 12, 0, 0, 0, time.UTC).AddDate(0, -14, 0)
	if _, err := db.Pool.Exec(ctx, `SELECT audit_ensure_partitions($1, 1)`, old); err != nil {
		t.Fatal(err)
	}
	// Five entries written fourteen and thirteen months ago (sealed by the
	// domain's code: the database's must continue them).
	prev := audit.Genesis
	var last audit.Entry
	for i := 1; i <= 5; i++ {
		at := old.AddDate(0, 0, i)
		if i > 3 {
			at = old.AddDate(0, 1, i)
		}
		e := audit.Entry{ID: ids.New("al"), MerchantID: m.ID, Chain: 0, Seq: int64(i), At: at, ActorType: audit.ActorMember,
			ActorID: "mem_1", Action: "charge.create", ObjectType: "charge", ObjectID: fmt.Sprint(i), IP: "192.0.2.1", UserAgent: "ua", RequestID: "r"}
		e.Seal(prev)
		prev, last = e.Hash, e
		if _, err := db.Pool.Exec(ctx, `INSERT INTO audit_log (id, merchant_id, chain, seq, at, actor_type, actor_id, action, object_type,
			object_id, ip, user_agent, request_id, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
			e.ID, e.MerchantID, e.Chain, e.Seq, e.At, e.ActorType, e.ActorID, e.Action, e.ObjectType, e.ObjectID, e.IP, e.UserAgent,
			e.RequestID, e.PrevHash, e.Hash); err != nil {
			t.Fatal(err)
		}
	}
	// The head, set where those entries end (the guard on audit_heads lets
	// a head start only at seq 0: a superuser seeds it here).
	tamper(t, db.Pool, `INSERT INTO audit_heads (merchant_id, chain, seq, hash, at) VALUES ($1, 0, 5, $2, $3)`,
		m.ID, last.Hash, last.At)
	for i := 0; i < 3; i++ {
		if _, err := db.Pool.Exec(ctx, `SELECT audit_append($1, $2, 0, 'api_key', 'key_1', 'charge.create', 'charge', 'new', '192.0.2.1', 'ua', 'req')`,
			ids.New("al"), m.ID); err != nil {
			t.Fatal(err)
		}
	}
	if sum := mustVerify(t, s); sum.Entries != 8 {
		t.Fatalf("%d entries before the drop, want 8", sum.Entries)
	}

	created, dropped, err := s.MaintainAuditLog(ctx, now)
	if err != nil || dropped != 2 {
		t.Fatalf("maintain: created %d, dropped %d, %v; want 2 dropped", created, dropped, err)
	}
	sum := mustVerify(t, s)
	if sum.Entries != 3 {
		t.Fatalf("%d entries after the drop, want 3", sum.Entries)
	}
	var seq int64
	var hash []byte
	if err := db.Pool.QueryRow(ctx, `SELECT seq, hash FROM audit_anchors WHERE merchant_id = $1 AND chain = 0 ORDER BY seq DESC LIMIT 1`, m.ID).Scan(&seq, &hash); err != nil {
		t.Fatal(err)
	}
	if seq != 5 || string(hash) != string(last.Hash) {
		t.Fatalf("anchor at seq %d, want 5 with the last dropped entry's hash", seq)
	}
	// The partitions ahead exist; a second run does nothing.
	var ahead int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'audit_log'::regclass
		AND inhrelid::regclass::text = 'audit_log_' || to_char($1::timestamptz AT TIME ZONE 'UTC', 'YYYY_MM')`,
		now.AddDate(0, store.AuditPartitionsAhead, 0)).Scan(&ahead); err != nil || ahead != 1 {
		t.Fatalf("partition %d months ahead: %d %v", store.AuditPartitionsAhead, ahead, err)
	}
	if created, dropped, err := s.MaintainAuditLog(ctx, now); err != nil || created != 0 || dropped != 0 {
		t.Fatalf("second run: %d %d %v", created, dropped, err)
	}
	// The chain still tells a removed entry after the anchor.
	tamper(t, db.Pool, `DELETE FROM audit_log WHERE merchant_id = $1 AND chain = 0 AND seq = 6`, m.ID)
	if sum, err := s.VerifyAudit(ctx); err != nil || len(sum.Broken) != 1 || sum.Broken[0].Seq != 6 {
		t.Fatalf("verify after deleting seq 6: %+v %v", sum.Broken, err)
	}
}

// bypass runs each statement with the triggers and event triggers off, as a
// superuser can.
func bypass(t *testing.T, pool *pgxpool.Pool, qs ...string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `SET session_replication_role = DEFAULT`) //nolint:errcheck
	for _, q := range qs {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// The application's database role cannot move a chain's head back, remove
// it, detach or drop a month of the log, switch the guards off, replace the
// log's functions, or record a drop or an anchor of its own: the database
// refuses each (migrations/00020_audit_guards.sql), and nothing changes.
func TestAuditGuardsRefuseTheAppRole(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	m := newMerchant(t, s, "guards@example.com")
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := db.Pool.Exec(ctx, `SELECT audit_append($1, $2, 0, 'api_key', 'key_1', 'charge.create', 'charge', 'x', '192.0.2.1', 'ua', 'req')`,
			ids.New("al"), m.ID); err != nil {
			t.Fatal(err)
		}
	}
	var partition string
	if err := db.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM audit_log LIMIT 1`).Scan(&partition); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE audit_heads SET seq = 0, hash = decode(repeat('00', 32), 'hex')`,
		`UPDATE audit_heads SET seq = 2, hash = (SELECT hash FROM audit_log WHERE seq = 2)`,
		`UPDATE audit_heads SET seq = 4`,
		`DELETE FROM audit_heads`,
		`TRUNCATE audit_heads`,
		`INSERT INTO audit_heads (merchant_id, chain, seq, hash, at) VALUES ('mer_other', 0, 7, '\x00', now())`,
		`ALTER TABLE audit_log DETACH PARTITION ` + partition,
		`ALTER TABLE audit_log DETACH PARTITION ` + partition + ` CONCURRENTLY`,
		`DROP TABLE ` + partition,
		`DROP TABLE audit_heads`,
		`ALTER TABLE audit_heads DISABLE TRIGGER ALL`,
		`ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only`,
		`ALTER TABLE ` + partition + ` RENAME TO audit_kept`,
		`DROP TRIGGER audit_heads_forward_only ON audit_heads`,
		`CREATE OR REPLACE FUNCTION audit_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$`,
		`CREATE TRIGGER audit_zz BEFORE UPDATE ON audit_heads FOR EACH ROW EXECUTE FUNCTION audit_refuse()`,
		`CREATE RULE audit_skip AS ON UPDATE TO audit_heads DO INSTEAD NOTHING`,
		`INSERT INTO audit_partition_drops (month, partition) VALUES (date_trunc('month', now()), 'audit_log_' || to_char(now(), 'YYYY_MM'))`,
		`INSERT INTO audit_anchors (merchant_id, chain, seq, hash, at, month) SELECT merchant_id, chain, seq, hash, at, date_trunc('month', at) FROM audit_log WHERE seq = 3`,
		`DELETE FROM audit_partition_months`,
		`INSERT INTO audit_partition_months (month, partition) VALUES ('2020-01-01', 'audit_log_2020_01')`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err == nil {
			t.Errorf("%s: accepted, want it refused", q)
		}
	}
	if sum := mustVerify(t, s); sum.Entries != 3 {
		t.Fatalf("%d entries after the refusals, want 3", sum.Entries)
	}
	// What the log needs still works: appending, next months' partitions.
	if _, err := db.Pool.Exec(ctx, `SELECT audit_append($1, $2, 0, 'api_key', 'key_1', 'charge.create', 'charge', 'x', '192.0.2.1', 'ua', 'req')`,
		ids.New("al"), m.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.MaintainAuditLog(ctx, time.Now().AddDate(0, 6, 0)); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, s)
}

// A month dropped behind retention's back (detached and dropped with the
// guards off, as a superuser can) and a head moved back: verify names the
// month's partition and the chain.
func TestVerifyFindsUnrecordedDropAndResetHead(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	m := newMerchant(t, s, "dropped@example.com")
	ctx := context.Background()
	for chain := 0; chain < 2; chain++ {
		for i := 0; i < 3; i++ {
			if _, err := db.Pool.Exec(ctx, `SELECT audit_append($1, $2, $3, 'api_key', 'key_1', 'charge.create', 'charge', 'x', '192.0.2.1', 'ua', 'req')`,
				ids.New("al"), m.ID, chain); err != nil {
				t.Fatal(err)
			}
		}
	}
	mustVerify(t, s)
	// A month ahead, empty: its drop loses no entry but still shows.
	ahead := "audit_log_" + time.Now().UTC().AddDate(0, 2, -time.Now().UTC().Day()+1).Format("2006_01")
	bypass(t, db.Pool, `ALTER TABLE audit_log DETACH PARTITION `+ahead, `DROP TABLE `+ahead,
		`UPDATE audit_heads SET seq = 1, hash = (SELECT hash FROM audit_log l WHERE l.merchant_id = audit_heads.merchant_id AND l.chain = 1 AND l.seq = 1) WHERE chain = 1`)
	sum, err := s.VerifyAudit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Missing) != 1 || sum.Missing[0].Partition != ahead || !strings.Contains(sum.Missing[0].Error(), "not recorded") {
		t.Errorf("months missing: %+v, want %s", sum.Missing, ahead)
	}
	if len(sum.Broken) != 1 || sum.Broken[0].MerchantID != m.ID || sum.Broken[0].Chain != 1 || sum.Broken[0].Seq != 2 ||
		!strings.Contains(sum.Broken[0].Reason, "moved back") {
		t.Errorf("broken chains: %+v, want merchant %s chain 1 seq 2, its head moved back", sum.Broken, m.ID)
	}
	if sum.Intact() {
		t.Error("verify says intact")
	}
}
