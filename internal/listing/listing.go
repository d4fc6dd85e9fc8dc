// Package listing holds the cursor pagination every list endpoint shares:
// newest first, at most Limit items, paging with StartingAfter or EndingBefore
// (an id from a previous page). Ids sort by creation time, so the cursor is the id.
package listing

// Default and maximum page sizes of api/openapi.yaml.
const (
	DefaultLimit = 10
	MaxLimit     = 100
)

// Params selects one page.
type Params struct {
	Limit         int
	StartingAfter string // items older than this id
	EndingBefore  string // items newer than this id
	// MayLag lets the page be read from a standby, which may lag the
	// primary by the replication delay: for a list asked for as such,
	// never for one read right after a write or as part of one object.
	MayLag bool
}

// Page is one page of items, newest first.
type Page[T any] struct {
	Items   []T
	HasMore bool
}

// Trim turns the Limit+1 rows a store fetched into a page. Rows fetched for
// EndingBefore come oldest first and are reversed so the page is newest first.
func Trim[T any](rows []T, p Params) Page[T] {
	more := len(rows) > p.Limit
	if more {
		rows = rows[:p.Limit]
	}
	if p.EndingBefore != "" {
		for i, j := 0, len(rows)-1; i < j; i, j = i+1, j-1 {
			rows[i], rows[j] = rows[j], rows[i]
		}
	}
	if rows == nil {
		rows = []T{}
	}
	return Page[T]{Items: rows, HasMore: more}
}
