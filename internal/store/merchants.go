package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/merchants"
)

const merchantColumns = `id, email, name, password_hash, created_at`

const insertMerchant = `INSERT INTO merchants (` + merchantColumns + `) VALUES ($1, $2, $3, $4, $5)`

// CreateMerchant stores m; a taken email is a Conflict.
func (s *Store) CreateMerchant(ctx context.Context, m merchants.Merchant) error {
	_, err := s.pool.Exec(ctx, insertMerchant, m.ID, m.Email, m.Name, m.PasswordHash, m.CreatedAt)
	return mapErr(err, "merchant")
}

const selectMerchantByID = `SELECT ` + merchantColumns + ` FROM merchants WHERE id = $1`

// MerchantByID returns the merchant or NotFound.
func (s *Store) MerchantByID(ctx context.Context, id string) (merchants.Merchant, error) {
	return s.oneMerchant(ctx, selectMerchantByID, id)
}

const selectMerchantByEmail = `SELECT ` + merchantColumns + ` FROM merchants WHERE lower(email) = lower($1)`

// MerchantByEmail returns the merchant with that email (any case) or NotFound.
func (s *Store) MerchantByEmail(ctx context.Context, email string) (merchants.Merchant, error) {
	return s.oneMerchant(ctx, selectMerchantByEmail, email)
}

func (s *Store) oneMerchant(ctx context.Context, query string, arg string) (merchants.Merchant, error) {
	rows, _ := s.pool.Query(ctx, query, arg)
	m, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[merchants.Merchant])
	return m, mapErr(err, "merchant")
}
