package store

import (
	"context"
	"errors"

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
	lockCustomer       = `SELECT 1 FROM customers WHERE id = $1 AND merchant_id = $2 FOR UPDATE`
	deleteCustomerKeys = `DELETE FROM payment_method_keys k USING payment_methods m
WHERE k.payment_method_id = m.id AND m.customer_id = $1 AND m.merchant_id = $2`
	deleteCustomerMethods = `DELETE FROM payment_methods WHERE customer_id = $1 AND merchant_id = $2`
	deleteCustomer        = `DELETE FROM customers WHERE id = $1 AND merchant_id = $2`
)

// DeleteCustomer implements customers.Store: the customer's row is locked
// (a payment method being saved for it waits, then finds it gone), the data
// keys of its payment methods are deleted, then the methods, sealed cards
// included, then the customer, in one transaction.
func (s *Store) DeleteCustomer(ctx context.Context, merchantID, id string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, lockCustomer, id, merchantID).Scan(&one); err != nil {
			return mapErr(err, "customer")
		}
		b := &pgx.Batch{}
		b.Queue(deleteCustomerKeys, id, merchantID)
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
	shareCustomer = `SELECT 1 FROM customers WHERE id = $1 AND merchant_id = $2 FOR KEY SHARE`
	// insertPaymentMethod writes the method and its data key's row in one
	// statement.
	insertPaymentMethod = `WITH m AS (INSERT INTO payment_methods (id, merchant_id, environment, customer_id, card_brand,
	card_last4, card_exp_month, card_exp_year, card_fingerprint, card_sealed, card_sealed_own, token_id, created_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) RETURNING id)
INSERT INTO payment_method_keys (payment_method_id, wrapped_key) SELECT id, $14 FROM m`
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
		if n.Sealed.Own == nil || n.Sealed.Key == nil || n.Sealed.Stub == nil {
			return apperr.Internal(errors.New("store: a payment method without its sealed card and data key"))
		}
		_, err := tx.Exec(ctx, insertPaymentMethod, m.ID, m.MerchantID, m.Environment, m.CustomerID, m.Card.Brand,
			m.Card.Last4, m.Card.ExpMonth, m.Card.ExpYear, m.Card.Fingerprint, n.Sealed.Stub, n.Sealed.Own, m.TokenID, m.CreatedAt,
			n.Sealed.Key)
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

// deletePaymentMethod deletes the method's data key and the method in one
// statement; the foreign key's ON DELETE CASCADE is a second guard (and
// what deletes the key when a release before data keys deletes a method).
const deletePaymentMethod = `WITH k AS (DELETE FROM payment_method_keys k USING payment_methods m
	WHERE k.payment_method_id = m.id AND m.id = $1 AND m.customer_id = $2 AND m.merchant_id = $3)
DELETE FROM payment_methods WHERE id = $1 AND customer_id = $2 AND merchant_id = $3`

// DeletePaymentMethod deletes a customer's payment method, its sealed card
// and its data key with it: NotFound unless the method is the merchant's
// customer's.
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

// savedCardColumns are a saved card's: the method's, its sealed card in
// both forms and its wrapped data key (NULL for a card not yet converted).
const savedCardColumns = paymentMethodColumns + `, card_sealed, card_sealed_own,
	(SELECT k.wrapped_key FROM payment_method_keys k WHERE k.payment_method_id = payment_methods.id)`

func scanSavedCard(row pgx.Row) (charges.SavedCard, error) {
	var c charges.SavedCard
	m, err := scanPaymentMethod(row, &c.Sealed, &c.Own, &c.Key)
	if err != nil {
		return charges.SavedCard{}, err
	}
	c.PaymentMethodID, c.MerchantID, c.CustomerID, c.Environment = m.ID, m.MerchantID, m.CustomerID, m.Environment
	c.Card, c.TokenID, c.AuthenticatedAt = m.Card, m.TokenID, m.AuthenticatedAt
	return c, nil
}

const selectSavedCard = `SELECT ` + savedCardColumns + ` FROM payment_methods WHERE id = $1 AND merchant_id = $2`

// SavedCard returns the merchant's payment method id with its sealed card
// and wrapped data key (charges takes a copy of the card from them), or
// NotFound.
func (s *Store) SavedCard(ctx context.Context, merchantID, id string) (charges.SavedCard, error) {
	c, err := scanSavedCard(s.pool.QueryRow(ctx, selectSavedCard, id, merchantID))
	return c, mapErr(err, "payment_method")
}

const selectLegacySavedCards = `SELECT ` + savedCardColumns + ` FROM payment_methods
WHERE card_sealed_own IS NULL AND id > $1 ORDER BY id LIMIT $2`

// LegacySavedCards implements customers.CardStore.
func (s *Store) LegacySavedCards(ctx context.Context, after string, limit int) ([]charges.SavedCard, error) {
	rows, err := s.pool.Query(ctx, selectLegacySavedCards, after, limit)
	if err != nil {
		return nil, mapErr(err, "payment_method")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (charges.SavedCard, error) { return scanSavedCard(r) })
	return out, mapErr(err, "payment_method")
}

// convertSavedCard replaces a legacy card by its conversion and writes the
// data key's row, in one statement, if the method still holds the legacy
// card.
const convertSavedCard = `WITH m AS (UPDATE payment_methods SET card_sealed = $3, card_sealed_own = $4
	WHERE id = $1 AND merchant_id = $2 AND card_sealed_own IS NULL AND card_sealed = $5 RETURNING id)
INSERT INTO payment_method_keys (payment_method_id, wrapped_key) SELECT id, $6 FROM m`

// ConvertSavedCard implements charges.CustomerStore.
func (s *Store) ConvertSavedCard(ctx context.Context, c charges.SavedCard, to charges.SealedCard) (bool, error) {
	if to.Own == nil || to.Key == nil || to.Stub == nil {
		return false, apperr.Internal(errors.New("store: a conversion without its sealed card and data key"))
	}
	tag, err := s.pool.Exec(ctx, convertSavedCard, c.PaymentMethodID, c.MerchantID, to.Stub, to.Own, c.Sealed, to.Key)
	if err != nil {
		return false, mapErr(err, "payment_method")
	}
	return tag.RowsAffected() == 1, nil
}

// mayVacuum says whether this connection's role may vacuum a table (owns
// it, or is a superuser); VACUUM only warns, and skips it, otherwise.
const mayVacuum = `SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class WHERE oid = $1::regclass`

// VacuumSavedCards implements customers.CardStore: it vacuums
// payment_method_keys (cheap: one small row per method, and the pages
// without dead rows are skipped), so that the rows of deleted data keys stop
// being rows of the table as soon as no transaction can still see them,
// instead of at autovacuum's next round; and payment_methods when cards
// were converted, for their legacy row versions. A table the role may not
// vacuum is skipped.
func (s *Store) VacuumSavedCards(ctx context.Context, converted bool) (keys, methods bool, err error) {
	vacuum := func(table string) (bool, error) {
		var may bool
		if err := s.pool.QueryRow(ctx, mayVacuum, table).Scan(&may); err != nil || !may {
			return false, mapErr(err, table)
		}
		_, err := s.pool.Exec(ctx, `VACUUM `+table)
		return err == nil, mapErr(err, table)
	}
	if keys, err = vacuum("payment_method_keys"); err != nil || !converted {
		return keys, false, err
	}
	methods, err = vacuum("payment_methods")
	return keys, methods, err
}
