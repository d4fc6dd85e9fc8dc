package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// objectKind is one of the objects list and get read.
type objectKind struct {
	name, path string
	columns    []string // fields of the text table
}

var objectKinds = []objectKind{
	{"charges", "/v1/charges", []string{"id", "amount", "currency", "status", "created_at"}},
	{"refunds", "/v1/refunds", []string{"id", "charge", "amount", "currency", "status", "created_at"}},
	{"events", "/v1/events", []string{"id", "event_type", "created_at"}},
}

func (c *cli) objectCommand(o objectKind) *cobra.Command {
	cmd := &cobra.Command{Use: o.name, Short: "List or get " + o.name}
	var limit int
	list := &cobra.Command{
		Use:   "list",
		Short: "List " + o.name + ", newest first",
		Args:  positional(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 100 {
				return usageError{fmt.Errorf("--limit must be from 1 to 100")}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			return c.show(cmd.Context(), cl, o, o.path+"?"+url.Values{"limit": {strconv.Itoa(limit)}}.Encode(), true)
		},
	}
	list.Flags().IntVar(&limit, "limit", 10, "how many (1-100)")
	get := &cobra.Command{
		Use:   "get ID",
		Short: "Show one of your " + o.name,
		Args:  positional(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := c.client()
			if err != nil {
				return err
			}
			return c.show(cmd.Context(), cl, o, o.path+"/"+url.PathEscape(args[0]), false)
		},
	}
	cmd.AddCommand(list, get)
	return cmd
}

// show prints a list or an object: as the API's JSON with --json, else as
// a table of the kind's columns (an object: field per line).
func (c *cli) show(ctx context.Context, cl *client, o objectKind, path string, isList bool) error {
	raw, err := cl.do(ctx, http.MethodGet, path, nil, nil, nil)
	if err != nil {
		return err
	}
	if c.json {
		_, err := c.out.Write(append(raw, '\n'))
		return err
	}
	w := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	defer w.Flush()
	if isList {
		var l struct {
			Data    []map[string]any `json:"data"`
			HasMore bool             `json:"has_more"`
		}
		if err := json.Unmarshal(raw, &l); err != nil {
			return err
		}
		fmt.Fprintln(w, strings.ToUpper(strings.Join(o.columns, "\t")))
		for _, item := range l.Data {
			vals := make([]string, len(o.columns))
			for i, col := range o.columns {
				vals[i] = text(item[col])
			}
			fmt.Fprintln(w, strings.Join(vals, "\t"))
		}
		if len(l.Data) == 0 {
			fmt.Fprintln(w, "(none)")
		}
		return nil
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return err
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	// The kind's columns first, the rest after in the API's field order is
	// lost in a map: alphabetical.
	sortFields(keys, o.columns)
	for _, k := range keys {
		fmt.Fprintf(w, "%s\t%s\n", k, text(obj[k]))
	}
	return nil
}

func sortFields(keys, first []string) {
	rank := func(k string) int {
		for i, f := range first {
			if f == k {
				return i
			}
		}
		return len(first)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0; j-- {
			a, b := keys[j-1], keys[j]
			if ra, rb := rank(a), rank(b); ra > rb || ra == rb && a > b {
				keys[j-1], keys[j] = b, a
			}
		}
	}
}

// text renders a JSON value for a table cell.
func text(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	b, _ := json.Marshal(v)
	return string(b)
}
