package listing

import (
	"slices"
	"testing"
)

// FuzzTrim: whatever the store fetched and whatever the page size, a page
// holds at most Limit items, HasMore says whether rows were left out, the
// items are the newest ones in newest-first order, and Items is never nil
// (it renders as [], not null).
func FuzzTrim(f *testing.F) {
	for _, tc := range []struct {
		rows, limit uint8
		before      bool
	}{{0, 10, false}, {0, 10, true}, {10, 10, false}, {11, 10, false}, {11, 10, true}, {1, 1, true}, {101, 100, true}, {2, 100, false}} {
		f.Add(tc.rows, tc.limit, tc.before)
	}
	f.Fuzz(func(t *testing.T, n, limit uint8, endingBefore bool) {
		p := Params{Limit: int(limit)%MaxLimit + 1}
		if endingBefore {
			p.EndingBefore = "cursor"
		}
		// The store fetches at most Limit+1 rows: newest first, or oldest
		// first when paging backwards. Row values are their age rank.
		fetched := min(int(n), p.Limit+1)
		var rows []int
		for i := range fetched {
			if endingBefore {
				rows = append(rows, fetched-1-i)
			} else {
				rows = append(rows, i)
			}
		}
		page := Trim(slices.Clone(rows), p)
		kept := min(fetched, p.Limit)
		switch {
		case page.Items == nil:
			t.Fatal("Items is nil")
		case len(page.Items) != kept:
			t.Fatalf("%d rows, limit %d: %d items, want %d", fetched, p.Limit, len(page.Items), kept)
		case page.HasMore != (fetched > p.Limit):
			t.Fatalf("%d rows, limit %d: HasMore %v", fetched, p.Limit, page.HasMore)
		}
		// Newest first: ranks ascend. Forward pages keep the newest rows;
		// backward pages keep the rows nearest the cursor (the oldest fetched).
		for i, v := range page.Items {
			want := i
			if endingBefore {
				want = fetched - kept + i
			}
			if v != want {
				t.Fatalf("%d rows, limit %d, ending_before %v: items %v", fetched, p.Limit, endingBefore, page.Items)
			}
		}
	})
}
