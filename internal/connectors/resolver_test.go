package connectors_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
	"github.com/gatehouse-pay/gatehouse/internal/store"
	"github.com/gatehouse-pay/gatehouse/internal/testenv"
)

// TestResolver: each connector has a circuit of its own (two sandbox
// connectors at one provider: one rehearsing an outage opens only its
// own); a change of the rehearsal reaches the worker within the refresh; a
// connector's own credentials reach the provider it builds, opened; a
// deleted connector still serves the charges it took.
func TestResolver(t *testing.T) {
	db := testenv.NewDB(t)
	s := store.New(db.Pool)
	ctx := context.Background()
	m := merchants.Merchant{ID: ids.New("mer"), Email: "resolver@example.com", Name: "n", PasswordHash: "h", CreatedAt: time.Now().UTC()}
	if err := s.CreateMerchant(ctx, m); err != nil {
		t.Fatal(err)
	}
	keys, err := keyring.New(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Now()
	dir := connectors.NewDirectory(s, nil, []string{"sandbox"}, "sandbox", time.Minute, time.Now)
	svc := connectors.NewService(s, keys, dir, []string{"sandbox"}, func() time.Time { return clock })
	create := func(body connectors.CreateParams) connectors.Connector {
		t.Helper()
		var made connectors.Connector
		_, err := svc.Create(ctx, m.ID, body, nil, func(c connectors.Connector) (idempotency.Response, error) {
			made = c
			return idempotency.Response{Status: 201}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return made
	}
	down := create(connectors.CreateParams{Provider: ptr("sandbox"), Name: ptr("down"),
		Sandbox: &connectors.SandboxParams{Unavailable: ptr(true)}})
	up := create(connectors.CreateParams{Provider: ptr("sandbox"), Name: ptr("up")})
	own := create(connectors.CreateParams{Provider: ptr("stripe"), Name: ptr("own"),
		Credentials: &map[string]string{"secret_key": "sk_test_resolver"}})

	sandbox := &providertest.Fake{}
	var built []string
	now := time.Now()
	r := connectors.NewResolver(s, keys, providers.Registry{"sandbox": sandbox},
		func(c connectors.Connector, cr connectors.Credentials) (providers.Provider, error) {
			built = append(built, cr.SecretKey)
			return &providertest.Fake{}, nil
		},
		func(name string, p providers.Provider) providers.Provider {
			return providers.NamedBreaker(name, p, providers.BreakerOptions{Failures: 3, OpenFor: time.Hour})
		}, 50*time.Millisecond, func() time.Time { return now })

	authorize := func(id string) error {
		t.Helper()
		p, err := r.Resolve(ctx, &id, "sandbox")
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.Authorize(ctx, providers.AuthorizeRequest{IdempotencyKey: "k", Amount: 1, Currency: "USD"})
		return err
	}
	for i := range 3 {
		err := authorize(down.ID)
		if !providers.NothingBooked(err) || !errors.Is(err, providers.ErrUnavailable) {
			t.Fatalf("call %d to the rehearsed outage: %v", i, err)
		}
	}
	if err := authorize(down.ID); !errors.Is(err, providers.ErrCircuitOpen) || !providers.NotSent(err) {
		t.Fatalf("after three outages the connector's circuit is open: %v", err)
	}
	if err := authorize(up.ID); err != nil || len(sandbox.Authorizes()) != 1 {
		t.Fatalf("the other sandbox connector is closed: %v, %d calls", err, len(sandbox.Authorizes()))
	}

	// The rehearsal turns into a decline once the worker reads it again.
	if _, err := svc.Update(ctx, m.ID, up.ID, connectors.UpdateParams{Sandbox: sandboxParams(t, `{"decline_code":"processing_error"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := authorize(up.ID); err != nil {
		t.Fatalf("within the refresh the old settings serve: %v", err)
	}
	now = now.Add(100 * time.Millisecond)
	if d, ok := providers.AsDecline(authorize(up.ID)); !ok || d.Code != "processing_error" {
		t.Fatalf("after the refresh: %v, want the rehearsed decline", d)
	}

	if err := authorize(own.ID); err != nil || len(built) != 1 || built[0] != "sk_test_resolver" {
		t.Fatalf("own credentials: %v, built with %v", err, built)
	}
	if err := svc.Delete(ctx, m.ID, up.ID); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	if _, err := r.Resolve(ctx, &up.ID, "sandbox"); err != nil {
		t.Fatalf("a deleted connector must still serve its charges: %v", err)
	}
	legacy, err := r.Resolve(ctx, nil, "sandbox")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := legacy.Authorize(ctx, providers.AuthorizeRequest{IdempotencyKey: "k2"}); err != nil {
		t.Fatalf("a charge made before connectors uses the server's provider: %v", err)
	}
	if _, err := r.Resolve(ctx, nil, "stripe"); !errors.Is(err, providers.ErrNotConfigured) {
		t.Fatalf("a provider the worker lacks: %v", err)
	}
}

func sandboxParams(t *testing.T, body string) *connectors.SandboxParams {
	t.Helper()
	var p connectors.SandboxParams
	if err := p.UnmarshalJSON([]byte(body)); err != nil {
		t.Fatal(err)
	}
	return &p
}

func ptr[T any](v T) *T { return &v }
