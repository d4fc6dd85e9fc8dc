package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/outbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
	"github.com/gatehouse-pay/gatehouse/internal/webhooks"
)

// BenchmarkChargePath is the Postgres side of a charge's whole path, one
// charge at a time on one connection (and one more for the delivery
// batches, with generic plans, as the worker runs them): the API's creation, the
// worker's authorization and capture against the sandbox, and the first
// attempts of both events (charge.created, charge.captured) to the one
// endpoint of the merchant (most merchants have one), with the services and
// processors the binaries run and a receiver that answers 200 at once. It
// reports the two server processes' CPU ("pg-µs/charge") and the WAL
// written ("wal-B/charge", the server's, so on a quiet server) per charge: what Postgres does for a charge, apart from the other processes
// that share a machine in `make bench`.
func BenchmarkChargePath(b *testing.B) {
	db := testenv.NewDB(b)
	ctx := context.Background()
	pool := onePool(b, db.URL)
	batchPool := onePool(b, db.URL, store.GenericPlans())
	s := store.New(pool).WithBatchPool(batchPool)
	m := newMerchant(b, s, "path@example.com")
	keys, err := keyring.New(make([]byte, 32))
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	q := &taskList{}
	hooks := webhooks.NewService(s, q, keys, true, time.Now, nil)
	url, events := "http://127.0.0.1:9/hook", []string{"charge.created", "charge.captured"}
	if _, err := hooks.Create(ctx, m.ID, "sandbox", webhooks.CreateParams{URL: &url, Events: events}, nil,
		func(webhooks.Endpoint, string) (idempotency.Response, error) {
			return idempotency.Response{Status: 201}, nil
		}); err != nil {
		b.Fatal(err)
	}
	svc := charges.NewService(s, q, keys, []string{"sandbox"}, "sandbox", time.Now, nil)
	reg := providers.Registry{"sandbox": sandbox.New(s.SandboxLedger(), sandbox.Options{})}
	proc := charges.NewProcessor(s, reg, keys, 5*time.Second, time.Now, log, nil).WithQueue(q)
	deliverer := webhooks.NewDeliverer(s, answerAtOnce{}, keys, []time.Duration{time.Minute}, time.Now, log, nil).
		WithQueue(func(context.Context, outbox.Task, time.Duration) error { return nil })
	render := func(v any) (idempotency.Response, error) {
		body, err := json.Marshal(v)
		return idempotency.Response{Status: 201, Body: body}, err
	}
	number, cvc, month, year, amount, capture := "4242424242424242", "123", 12, time.Now().Year()+2, int64(2000), true
	description := "Order 1234"
	params := charges.CreateParams{Amount: &amount, Currency: ptr("usd"), Card: &charges.CardInput{Number: &number, ExpMonth: &month, ExpYear: &year, CVC: &cvc},
		PaymentMethod: ptr("card"), Capture: &capture, Description: &description, Metadata: map[string]string{"order_id": "1234", "customer": "c_1"}}
	run := time.Now().UnixNano()
	path := func(i int) {
		key := &idempotency.Request{Key: fmt.Sprintf("path-%d-%d", run, i), Fingerprint: []byte("fp")}
		if _, err := svc.Create(ctx, m.ID, "sandbox", params, key, render); err != nil {
			b.Fatal(err)
		}
		for len(q.tasks) > 0 {
			t := q.tasks[0]
			q.tasks = q.tasks[1:]
			var err error
			switch t.Type {
			case outbox.ChargeAuthorize:
				err = proc.Authorize(ctx, t.RefID, false)
			case outbox.ChargeCapture:
				err = proc.Capture(ctx, t.RefID, false)
			case outbox.WebhookEvent:
				err = deliverer.DeliverEvent(ctx, t.RefID)
			default:
				b.Fatalf("task %s", t.ID())
			}
			if err != nil {
				b.Fatalf("%s: %v", t.ID(), err)
			}
		}
	}
	for i := range 20 { // warm the connection's plan cache
		path(i)
	}
	main, batches := backendCPU(b, pool), backendCPU(b, batchPool)
	backend := func() time.Duration { return main() + batches() }
	lsn := func() (n int64) {
		if err := db.Pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	cpu0 := backend()
	wal0 := lsn()
	b.ResetTimer()
	for i := range b.N {
		path(20 + i)
	}
	b.StopTimer()
	cpu, wal := backend()-cpu0, lsn()
	var delivered int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded'`).Scan(&delivered); err != nil {
		b.Fatal(err)
	}
	if want := 2 * (b.N + 20); delivered != want {
		b.Fatalf("%d deliveries succeeded, want %d", delivered, want)
	}
	var tasks int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&tasks); err != nil || tasks != 0 {
		b.Fatalf("%d outbox rows left (%v), want none: every task is done", tasks, err)
	}
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "pg-µs/charge")
	b.ReportMetric(float64(wal-wal0)/float64(b.N), "wal-B/charge")
}

// taskList is the queue of BenchmarkChargePath: the tasks the path
// enqueues, run in order by the benchmark itself.
type taskList struct {
	mu    sync.Mutex
	tasks []outbox.Task
}

func (q *taskList) Enqueue(_ context.Context, t outbox.Task) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.tasks = append(q.tasks, t)
	return nil
}

// answerAtOnce is a receiver that answers 200 at once.
type answerAtOnce struct{}

func (answerAtOnce) Send(context.Context, webhooks.Outgoing) webhooks.Response {
	return webhooks.Response{StatusCode: 200, Duration: time.Millisecond}
}
