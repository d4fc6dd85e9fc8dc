package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/listing"
)

const contentTypeJSON = "application/json; charset=utf-8"

// writeJSON renders v with the contract's content type.
func writeJSON(c *fiber.Ctx, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return apperr.Internal(err)
	}
	c.Status(status)
	c.Set(fiber.HeaderContentType, contentTypeJSON)
	return c.Send(b)
}

// timestamp renders t as RFC 3339 UTC with milliseconds.
func timestamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func timestampOrNil(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := timestamp(*t)
	return &s
}

var (
	errNotJSON     = &apperr.Error{Kind: apperr.KindUnsupportedMedia, Code: apperr.CodeUnsupportedMedia, Message: "Request bodies must be JSON: send Content-Type: application/json."}
	errNotAnObject = &apperr.Error{Kind: apperr.KindInvalid, Code: apperr.CodeInvalidJSON, Message: "Request body must be a JSON object."}
)

// decodeJSON reads the body into dst strictly: it must be one JSON object
// whose fields dst knows, with the right types. An empty body is an empty
// object, so required fields are reported as missing by the caller.
//
// A top-level "environment" of "live" is refused with live_mode_disabled on
// every route, before the fields are checked: a route that takes no
// environment must not answer 400 to a live-mode request.
func decodeJSON(c *fiber.Ctx, dst any) error {
	body := c.BodyRaw() // never Body: it would decode a Content-Encoding unbounded
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	mt, _, err := mime.ParseMediaType(c.Get(fiber.HeaderContentType))
	if err != nil || !(mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return errNotJSON
	}
	return decodeObject(body, dst)
}

// decodeObject is decodeJSON's reading of a non-empty document, whatever
// carried it (a request body, a dashboard form's field).
func decodeObject(body []byte, dst any) error {
	if b := bytes.TrimLeft(body, " \t\r\n"); len(b) == 0 || b[0] != '{' {
		if !json.Valid(body) {
			return &apperr.Error{Kind: apperr.KindInvalid, Code: apperr.CodeInvalidJSON, Message: "Request body is not valid JSON."}
		}
		return errNotAnObject
	}
	if !utf8.Valid(body) {
		return &apperr.Error{Kind: apperr.KindInvalid, Code: apperr.CodeInvalidJSON, Message: "Request body is not valid UTF-8."}
	}
	if err := checkDuplicates(body); err != nil {
		return err
	}
	if liveMode(body) {
		return apperr.LiveMode()
	}
	if err := checkFields(body, reflect.TypeOf(dst), ""); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &apperr.Error{Kind: apperr.KindInvalid, Code: apperr.CodeInvalidJSON, Message: "Request body must hold exactly one JSON object."}
	}
	return checkNUL(reflect.ValueOf(dst), "")
}

// liveMode reports whether the object's top-level environment is "live", in
// any case (encoding/json matches the name without regard to case too).
func liveMode(body []byte) bool {
	var probe struct {
		Environment any `json:"environment"`
	}
	if json.Unmarshal(body, &probe) != nil {
		return false
	}
	env, ok := probe.Environment.(string)
	return ok && strings.EqualFold(strings.TrimSpace(env), "live")
}

// checkDuplicates refuses an object holding one name twice, at any depth:
// encoding/json keeps the last value, while a log, a proxy or a signature
// may have read the first.
func checkDuplicates(body []byte) error {
	type frame struct {
		object bool
		path   string          // of this object or array
		seen   map[string]bool // names met in this object
		name   string          // the name whose value comes next, "" when a name comes next
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // malformed JSON: the typed decode reports it
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if name, ok := tok.(string); ok && top != nil && top.object && top.name == "" {
			if top.seen[name] {
				param := join(top.path, name)
				return apperr.Invalid(param, "Parameter %s appears more than once.", param)
			}
			top.seen[name] = true
			top.name = name
			continue
		}
		path := ""
		if top != nil {
			path = top.path
			if top.object {
				path = join(top.path, top.name)
				top.name = "" // this token is the value
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, path: path, seen: map[string]bool{}})
		case json.Delim('['):
			stack = append(stack, &frame{path: path})
		case json.Delim('}'), json.Delim(']'):
			if stack = stack[:len(stack)-1]; len(stack) == 0 {
				return nil
			}
		}
	}
}

func decodeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return errNotAnObject
		}
		return apperr.Invalid(typeErr.Field, "Invalid type for parameter %s: expected %s.", typeErr.Field, jsonType(typeErr.Type.Kind().String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field, _ := strconv.Unquote(strings.TrimPrefix(err.Error(), "json: unknown field "))
		return apperr.Invalid(field, "Received unknown parameter: %s.", field)
	}
	return &apperr.Error{Kind: apperr.KindInvalid, Code: apperr.CodeInvalidJSON, Message: "Request body is not valid JSON."}
}

func jsonType(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int64", "int32", "uint", "uint64", "float64":
		return "a number"
	case "slice", "array":
		return "an array"
	}
	return "an object"
}

// listParams parses limit, starting_after and ending_before; valid says
// whether a cursor can be an id of the list.
func listParams(c *fiber.Ctx, valid func(string) bool) (listing.Params, error) {
	p := listing.Params{Limit: listing.DefaultLimit}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > listing.MaxLimit {
			return p, apperr.Invalid("limit", "limit must be an integer from 1 to %d.", listing.MaxLimit)
		}
		p.Limit = n
	}
	return cursors(c, p, valid)
}

// cursors reads starting_after and ending_before into p. A page asked for
// with GET may lag the primary (it may come from the standby): a list
// rendered in the answer to a write is read from the primary.
func cursors(c *fiber.Ctx, p listing.Params, valid func(string) bool) (listing.Params, error) {
	p.MayLag = c.Method() == fiber.MethodGet
	p.StartingAfter = strings.Clone(c.Query("starting_after"))
	p.EndingBefore = strings.Clone(c.Query("ending_before"))
	switch {
	case p.StartingAfter != "" && p.EndingBefore != "":
		return p, apperr.Invalid("ending_before", "Pass at most one of starting_after and ending_before.")
	case p.StartingAfter != "" && !valid(p.StartingAfter):
		return p, apperr.Invalid("starting_after", "starting_after must be an id from this list.")
	case p.EndingBefore != "" && !valid(p.EndingBefore):
		return p, apperr.Invalid("ending_before", "ending_before must be an id from this list.")
	}
	return p, nil
}
