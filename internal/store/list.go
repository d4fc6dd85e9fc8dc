package store

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/gatehouse-pay/gatehouse/internal/listing"
)

// listPage runs a list query for one page: query selects the columns scan
// reads and ends in an open WHERE clause over args; listPage adds the cursor
// of p, newest first (ids sort by creation time), and fetches one row more
// than the page to learn whether more follow. A page that may lag is read
// from the standby when there is a fresh one (see Store.read).
func listPage[T any](ctx context.Context, s *Store, query string, args []any, p listing.Params, scan func(pgx.Row) (T, error), what string) (listing.Page[T], error) {
	order := "DESC"
	switch {
	case p.StartingAfter != "":
		args = append(args, p.StartingAfter)
		query += " AND id < $" + strconv.Itoa(len(args))
	case p.EndingBefore != "":
		args = append(args, p.EndingBefore)
		query += " AND id > $" + strconv.Itoa(len(args))
		order = "ASC"
	}
	args = append(args, p.Limit+1)
	query += " ORDER BY id " + order + " LIMIT $" + strconv.Itoa(len(args))
	var list []T
	err := s.read(ctx, p.MayLag, func(db dbtx) error {
		rows, err := db.Query(ctx, query, args...)
		if err != nil {
			return err
		}
		list, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
		return err
	})
	if err != nil {
		return listing.Page[T]{}, mapErr(err, what)
	}
	return listing.Trim(list, p), nil
}
