package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/authz"
	"github.com/gatehouse-pay/gatehouse/internal/members"
	"github.com/gatehouse-pay/gatehouse/internal/merchants"
)

const merchantColumns = `id, email, name, password_hash, created_at`

const insertMerchant = `INSERT INTO merchants (` + merchantColumns + `) VALUES ($1, $2, $3, $4, $5)`

// CreateMerchant stores m and its first member, its owner, who signs in
// with m's email and password. The email may belong to merchants and
// members of other accounts (migration 00019).
func (s *Store) CreateMerchant(ctx context.Context, m merchants.Merchant) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, insertMerchant, m.ID, m.Email, m.Name, m.PasswordHash, m.CreatedAt); err != nil {
			return mapErr(err, "merchant")
		}
		_, err := tx.Exec(ctx, insertMember, members.OwnerID(m.ID), m.ID, m.Email, authz.Owner, m.PasswordHash, nil, nil, m.CreatedAt)
		return mapErr(err, "merchant")
	})
}

const selectMerchantByID = `SELECT ` + merchantColumns + ` FROM merchants WHERE id = $1`

// MerchantByID returns the merchant or NotFound.
func (s *Store) MerchantByID(ctx context.Context, id string) (merchants.Merchant, error) {
	return s.oneMerchant(ctx, selectMerchantByID, id)
}

func (s *Store) oneMerchant(ctx context.Context, query string, arg string) (merchants.Merchant, error) {
	rows, _ := s.pool.Query(ctx, query, arg)
	m, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[merchants.Merchant])
	return m, mapErr(err, "merchant")
}
