package webhooks

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
)

// Filter limits, documented in docs/webhooks.md.
const (
	// MaxFilterConditions is how many paths one filter may test.
	MaxFilterConditions = 20
	// MaxFilterValues is how many values $in and $nin may list.
	MaxFilterValues = 100
	// MaxFilterBytes bounds a filter's JSON.
	MaxFilterBytes  = 8 << 10
	maxPathSegments = 10
	maxPathLength   = 256
)

// pathSegment is one name of a dotted path into the event body: a field
// name or an array index.
var pathSegment = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// filterOperators are the operators a condition may use, and the kind of
// argument each takes.
var filterOperators = map[string]string{
	"$eq": "scalar", "$neq": "scalar",
	"$in": "list", "$nin": "list",
	"$gt": "ordered", "$gte": "ordered", "$lt": "ordered", "$lte": "ordered",
	"$exist": "bool",
}

// ParseFilter checks the "filter" of an endpoint and returns it in the form
// the store keeps and the database applies when an event is written:
// {"dotted.path": {"$op": argument, ...}, ...}, each condition an object of
// operators. A bare value is shorthand for {"$eq": value}. JSON null or {}
// means no filter (nil). A bad filter is a parameter_invalid error whose
// param names the condition's path ("filter.data.charge.currency").
func ParseFilter(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if len(raw) > MaxFilterBytes {
		return nil, apperr.Invalid("filter", "filter must be at most %d bytes of JSON.", MaxFilterBytes)
	}
	var conds map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &conds) != nil {
		return nil, apperr.Invalid("filter", `filter must be an object of conditions, such as {"data.charge.currency": {"$in": ["USD"]}}.`)
	}
	if len(conds) == 0 {
		return nil, nil
	}
	if len(conds) > MaxFilterConditions {
		return nil, apperr.Invalid("filter", "filter may test at most %d paths.", MaxFilterConditions)
	}
	out := make(map[string]map[string]any, len(conds))
	for path, cond := range conds {
		ops, err := parseCondition(path, cond)
		if err != nil {
			return nil, err
		}
		out[path] = ops
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, apperr.Internal(err)
	}
	return b, nil
}

func parseCondition(path string, cond json.RawMessage) (map[string]any, error) {
	param := "filter." + path
	bad := func(format string, args ...any) error {
		return apperr.Invalid(param, "filter condition %q: "+format, append([]any{path}, args...)...)
	}
	if err := checkPath(path); err != nil {
		return nil, bad("%s", err.Error())
	}
	v, err := decodeJSON(cond)
	if err != nil {
		return nil, bad("not valid JSON.")
	}
	obj, isObject := v.(map[string]any)
	switch {
	case !isObject:
		if !scalar(v) {
			return nil, bad(`a list is not a value to compare; use {"$in": [...]}.`)
		}
		return map[string]any{"$eq": v}, nil
	case len(obj) == 0:
		return nil, bad("name at least one operator: %s.", operatorNames())
	}
	for op, arg := range obj {
		kind, ok := filterOperators[op]
		if !ok {
			if !strings.HasPrefix(op, "$") {
				return nil, bad(`compare with an operator, such as {"$eq": ...}; objects are not values to compare.`)
			}
			return nil, bad("unknown operator %q; use %s.", op, operatorNames())
		}
		if err := checkArgument(op, kind, arg); err != nil {
			return nil, bad("%s", err.Error())
		}
	}
	return obj, nil
}

type filterError string

func (e filterError) Error() string { return string(e) }

func checkPath(path string) error {
	if path == "" || len(path) > maxPathLength {
		return filterError("a path must be 1 to 256 characters, such as data.charge.currency.")
	}
	segs := strings.Split(path, ".")
	if len(segs) > maxPathSegments {
		return filterError("a path may have at most 10 names.")
	}
	for _, s := range segs {
		if !pathSegment.MatchString(s) {
			return filterError("a path is names of letters, digits, _ and - joined by dots, such as data.charge.currency.")
		}
	}
	return nil
}

func checkArgument(op, kind string, arg any) error {
	switch kind {
	case "scalar":
		if !scalar(arg) {
			return filterError(op + " takes a string, number, boolean or null.")
		}
	case "list":
		list, ok := arg.([]any)
		if !ok || len(list) == 0 || len(list) > MaxFilterValues {
			return filterError(op + " takes a list of 1 to 100 values.")
		}
		for _, x := range list {
			if !scalar(x) {
				return filterError(op + " lists strings, numbers, booleans or null.")
			}
		}
	case "ordered":
		switch x := arg.(type) {
		case json.Number:
		case string:
			if strings.ContainsRune(x, 0) {
				return filterError(op + " must not contain NUL characters.")
			}
		default:
			return filterError(op + " takes a number or a string.")
		}
	case "bool":
		if _, ok := arg.(bool); !ok {
			return filterError(op + " takes true or false.")
		}
	}
	return nil
}

// scalar reports whether v is a value a condition compares: a string
// (without NUL, which the database cannot hold), number, boolean or null.
func scalar(v any) bool {
	switch x := v.(type) {
	case string:
		return !strings.ContainsRune(x, 0)
	case nil, bool, json.Number:
		return true
	}
	return false
}

func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func operatorNames() string {
	return "$eq, $neq, $in, $nin, $gt, $gte, $lt, $lte, $exist"
}
