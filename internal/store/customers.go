package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/audit"
	"github.com/gatehouse-pay/gatehouse/internal/charges"
	"github.com/gatehouse-pay/gatehouse/internal/customers"
	"github.com/gatehouse-pay/gatehouse/internal/idempotency"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
)

const customerColumns = `id, merchant_id, environment, email, name, description, metadata, created_at, updated_at`

func scanCustomer(row pgx.Row) (customers.Customer, error) {
	var c customers.Customer
	err := row.Scan(&c.ID, &c.MerchantID, &c.Environment, &c.Email, &c.Name, &c.Description, &c.Metadata,
		&c.CreatedAt, &c.UpdatedAt)
	return c, err
}

const insertCustomer = `INSERT INTO customers (` + customerColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`

// CreateCustomer implements customers.Store.
func (s *Store) CreateCustomer(ctx context.Context, c customers.Customer, idem *idempotency.Request, first idempotency.Response) (*idempotency.Response, error) {
	audit.SetObject(ctx, "customer", c.ID)
	return s.createOnce(ctx, c.MerchantID, idem, first, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, insertCustomer, c.ID, c.MerchantID, c.Environment, c.Email, c.Name, c.Description,
			c.Metadata, c.CreatedAt, c.UpdatedAt)
		return mapErr(err, "customer")
	})
}

const selectCustomer = `SELECT ` + customerColumns + ` FROM customers WHERE id = $1 AND merchant_id = $2`

// CustomerByID returns the merchant's customer or NotFound.
func (s *Store) CustomerByID(ctx context.Context, merchantID, id string) (customers.Customer, error) {
	c, err := scanCustomer(s.pool.QueryRow(ctx, selectCustomer, id, merchantID))
	return c, mapErr(err, "customer")
}

// ListCustomers returns a page of the merchant's customers, newest first;
// a filter by email matches in any case.
func (s *Store) ListCustomers(ctx context.Context, merchantID string, f customers.Filter, p listing.Params) (listing.Page[customers.Customer], error) {
	query := `SELECT ` + customerColumns + ` FROM customers WHERE merchant_id = $1`
	args := []any{merchantID}
	if f.Email != "" {
		args = append(args, f.Email)
		query += ` AND email IS NOT NULL AND lower(email) = lower($2)`
	}
	return listPage(ctx, s, query, args, p, scanCustomer, "customer")
}

// updateCustomer sets each text field whose flag is true (to NULL when its
// value is) and the metadata when given.
const updateCustomer = `UPDATE customers SET
	email = CASE WHEN $3 THEN $4 ELSE email END,
	name = CASE WHEN $5 THEN $6 ELSE name END,
	description = CASE WHEN $7 THEN $8 ELSE description END,
	metadata = coalesce($9::jsonb, metadata),
	updated_at = $10
WHERE id = $1 AND merchant_id = $2
RETURNING ` + customerColumns

// UpdateCustomer implements customers.Store.
func (s *Store) UpdateCustomer(ctx context.Context, merchantID, id string, p customers.Patch) (c customers.Customer, err error) {
	email, setEmail := p.Email.Get()
	name, setName := p.Name.Get()
	desc, setDesc := p.Description.Get()
	err = s.audited(ctx, func(q dbtx) error {
		c, err = scanCustomer(q.QueryRow(ctx, updateCustomer, id, merchantID, setEmail, email, setName, name,
			setDesc, desc, p.Metadata, p.At))
		return mapErr(err, "customer")
	})
	return c, err
}

const (
	lockCustomer          = `SELECT 1 FROM customers WHERE id = $1 AND merchant_id = $2 FOR UPDATE`
	deleteCustomerMethods = `DELETE FROM payment_methods WHERE customer_id = $1 AND merchant_id = $2`
	deleteCustomer        = `DELETE FROM customers WHERE id = $1 AND merchant_id = $2`
)

// DeleteCustomer implements customers.Store: the customer's row is locked
// (a payment method being saved for it waits, then finds it gone), its
// payment methods are deleted, sealed cards included, then the customer.
func (s *Store) DeleteCustomer(ctx context.Context, merchantID, id string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, lockCustomer, id, merchantID).Scan(&one); err != nil {
			return mapErr(err, "customer")
		}
		b := &pgx.Batch{}
		b.Queue(deleteCustomerMethods, id, merchantID)
		b.Queue(deleteCustomer, id, merchantID)
		return mapErr(tx.SendBatch(ctx, b).Close(), "customer")
	})
}

const paymentMethodColumns = `id, merchant_id, environment, customer_id, card_brand, card_last4, card_exp_month,
card_exp_year, card_fingerprint, token_id, authenticated_at, created_at`

// scanPaymentMethod is the one mapping from a payment_methods row
// (paymentMethodColumns, plus any extra destinations) to a PaymentMethod.
func scanPaymentMethod(row pgx.Row, extra ...any) (customers.PaymentMethod, error) {
	var m customers.PaymentMethod
	var last4, fp string
	var month, year int
	dest := []any{&m.ID, &m.MerchantID, &m.Environment, &m.CustomerID, &m.Card.Brand, &last4, &month,
		&year, &fp, &m.TokenID, &m.AuthenticatedAt, &m.CreatedAt}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return customers.PaymentMethod{}, err
	}
	m.Card.Last4, m.Card.ExpMonth, m.Card.ExpYear, m.Card.Fingerprint = &last4, &month, &year, &fp
	return m, nil
}

const (
	// shareCustomer holds the customer while a payment method is saved for
	// it: a concurrent deletion waits for the method, then deletes it too.
	shareCustomer       = `SELECT 1 FROM customers WHERE id = $1 AND merchant_id = $2 FOR KEY SHARE`
	insertPaymentMethod = `INSERT INTO payment_methods (id, merchant_id, environment, customer_id, card_brand,
	card_last4, card_exp_month, card_exp_year, card_fingerprint, card_sealed, token_id, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`
	// useTokenForMethod marks a token used by a payment method and clears
	// its copy of the card; a token used or expired meanwhile matches no row.
	useTokenForMethod = `UPDATE card_tokens SET used_at = $4, payment_method_id = $5, card_sealed = NULL
WHERE id = $1 AND merchant_id = $2 AND environment = $3 AND used_at IS NULL AND expires_at > $4`
)

// CreatePaymentMethod implements customers.Store.
func (s *Store) CreatePaymentMethod(ctx context.Context, n customers.NewPaymentMethod) (*idempotency.Response, error) {
	m := n.Method
	audit.SetObject(ctx, "payment_method", m.ID)
	return s.createOnce(ctx, m.MerchantID, n.Idem, n.Response, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, shareCustomer, m.CustomerID, m.MerchantID).Scan(&one); err != nil {
			return mapErr(err, "customer")
		}
		_, err := tx.Exec(ctx, insertPaymentMethod, m.ID, m.MerchantID, m.Environment, m.CustomerID, m.Card.Brand,
			m.Card.Last4, m.Card.ExpMonth, m.Card.ExpYear, m.Card.Fingerprint, n.Sealed, m.TokenID, m.CreatedAt)
		if err != nil || n.TokenID == "" {
			return mapErr(err, "payment_method")
		}
		tag, err := tx.Exec(ctx, useTokenForMethod, n.TokenID, m.MerchantID, m.Environment, m.CreatedAt, m.ID)
		if err != nil {
			return mapErr(err, "token")
		}
		if tag.RowsAffected() == 0 {
			return charges.ErrTokenUnusable()
		}
		return nil
	})
}

const customerExists = `SELECT 1 FROM customers WHERE id = $1 AND merchant_id = $2`

// ListPaymentMethods returns a page of the payment methods of one of the
// merchant's customers, newest first; another merchant's customer is
// NotFound.
func (s *Store) ListPaymentMethods(ctx context.Context, merchantID, customerID string, p listing.Params) (listing.Page[customers.PaymentMethod], error) {
	var one int
	if err := s.pool.QueryRow(ctx, customerExists, customerID, merchantID).Scan(&one); err != nil {
		return listing.Page[customers.PaymentMethod]{}, mapErr(err, "customer")
	}
	query := `SELECT ` + paymentMethodColumns + ` FROM payment_methods WHERE merchant_id = $1 AND customer_id = $2`
	return listPage(ctx, s, query, []any{merchantID, customerID}, p,
		func(r pgx.Row) (customers.PaymentMethod, error) { return scanPaymentMethod(r) }, "payment_method")
}

const deletePaymentMethod = `DELETE FROM payment_methods WHERE id = $1 AND customer_id = $2 AND merchant_id = $3`

// DeletePaymentMethod deletes a customer's payment method, its sealed card
// with it: NotFound unless the method is the merchant's customer's.
func (s *Store) DeletePaymentMethod(ctx context.Context, merchantID, customerID, id string) error {
	return s.audited(ctx, func(q dbtx) error { return deletePaymentMethodOn(ctx, q, merchantID, customerID, id) })
}

func deletePaymentMethodOn(ctx context.Context, q dbtx, merchantID, customerID, id string) error {
	tag, err := q.Exec(ctx, deletePaymentMethod, id, customerID, merchantID)
	if err != nil {
		return mapErr(err, "payment_method")
	}
	if tag.RowsAffected() == 0 {
		return apperr.NotFound("payment_method")
	}
	return nil
}

const selectSavedCard = `SELECT ` + paymentMethodColumns + `, card_sealed FROM payment_methods WHERE id = $1 AND merchant_id = $2`

// SavedCard returns the merchant's payment method id with its sealed card
// (sealed under the method's id; charges.ResealCard moves it to a charge),
// or NotFound.
func (s *Store) SavedCard(ctx context.Context, merchantID, id string) (charges.SavedCard, error) {
	var sealed []byte
	m, err := scanPaymentMethod(s.pool.QueryRow(ctx, selectSavedCard, id, merchantID), &sealed)
	if err != nil {
		return charges.SavedCard{}, mapErr(err, "payment_method")
	}
	return charges.SavedCard{PaymentMethodID: m.ID, CustomerID: m.CustomerID, Environment: m.Environment,
		Card: m.Card, TokenID: m.TokenID, AuthenticatedAt: m.AuthenticatedAt, Sealed: sealed}, nil
}
