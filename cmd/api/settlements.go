package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/config"
	"github.com/gatehouse-pay/gatehouse/internal/connectors"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/providers"
	"github.com/gatehouse-pay/gatehouse/internal/providers/sandbox"
	"github.com/gatehouse-pay/gatehouse/internal/providers/stripe"
	"github.com/gatehouse-pay/gatehouse/internal/reconcile"
	"github.com/gatehouse-pay/gatehouse/internal/store"
)

// settlementReports fetches a connector's settlement report for
// reconciliation: a sandbox connector's from the sandbox's own books (its
// fee schedule, SANDBOX_SETTLEMENT_DELAY), a Stripe connector's from its
// account's balance transactions (its own key, or the server's). Adyen
// reports are uploaded.
func settlementReports(db *store.Store, keys *keyring.Keyring, cfg config.Config) reconcile.Fetch {
	sb := sandbox.New(db.SandboxLedger(), sandbox.Options{})
	client := &http.Client{Timeout: cfg.ProviderTimeout}
	return func(ctx context.Context, c connectors.Connector, from, to time.Time) ([]providers.SettlementLine, error) {
		switch c.Provider {
		case connectors.ProviderSandbox:
			fees := c.FeeSchedule()
			return sb.Settled(ctx, c.ID, sandbox.Terms{Fee: func(amount int64) int64 { return fees.For(amount).Amount },
				Delay: cfg.SandboxSettlementDelay}, from, to)
		case connectors.ProviderStripe:
			key := cfg.StripeSecretKey.Reveal()
			if c.Sealed != nil {
				cr, err := connectors.OpenCredentials(keys, c)
				if err != nil {
					return nil, fmt.Errorf("settlement report of %s: credentials: %w", c.ID, err)
				}
				key = cr.SecretKey
			}
			if key == "" {
				return nil, reconcile.ErrNoReport
			}
			lines, err := stripe.New(key, cfg.StripeAPIBase, client).Settled(ctx, from, to)
			if err != nil && !errors.Is(err, providers.ErrUnavailable) {
				err = fmt.Errorf("%w: %w", reconcile.ErrRefused, err)
			}
			return lines, err
		}
		return nil, reconcile.ErrNoReport
	}
}
