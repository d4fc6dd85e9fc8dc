package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/httpapi"
	"github.com/gatehouse-pay/gatehouse/internal/providers/providertest"
	"github.com/gatehouse-pay/gatehouse/internal/reconcile"
)

// bodyRoute is how TestAbusiveBodies reaches one route that takes a body: a
// path with real ids, the credentials it wants, and a good body to spoil.
type bodyRoute struct {
	path string
	auth []string
	// base is a good body as ordered fields with their raw JSON values.
	base []field
	// str and num name a string and a number field of the body ("" if none).
	str, num string
	// emptyIsValid: every field is optional, so an empty body (an empty
	// object, api/openapi.yaml) is a valid request, not abuse.
	emptyIsValid bool
	// unlisted: the contract does not list the 413 and 415 the route can
	// answer yet (see send).
	unlisted bool
	// signed: the body is a provider's document, read only once its
	// signature verifies; any abusive body, unsigned, is refused 4xx
	// whatever it holds (the refusals of signed bodies are
	// TestProviderNotifications').
	signed bool
	// bodyLimit is the route's own limit when it takes bodies larger than
	// httpapi.BodyLimit (an uploaded report); 0 for the usual one.
	bodyLimit int
}

type field struct{ name, raw string }

func render(fields []field) string {
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = fmt.Sprintf("%q:%s", f.name, f.raw)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// with returns base with name's raw value replaced (or added).
func with(base []field, name, raw string) []field {
	out := slices.Clone(base)
	for i := range out {
		if out[i].name == name {
			out[i].raw = raw
			return out
		}
	}
	return append(out, field{name, raw})
}

type abuseCase struct {
	name    string
	body    string
	headers []string
	status  int
	codes   []string // any of these error codes
	param   string   // the error's param, when one field is at fault
}

// abuseCases are the spoiled bodies of one route.
func abuseCases(r bodyRoute) []abuseCase {
	good := render(r.base)
	bad := func(name, body string, codes ...string) abuseCase {
		return abuseCase{name: name, body: body, status: 400, codes: codes}
	}
	nested := func(open, close string) string {
		return strings.Repeat(open, 10000) + strings.Repeat(close, 10000)
	}
	cases := []abuseCase{
		bad("invalid JSON", strings.TrimSuffix(good, "}")+",}", "invalid_json"),
		bad("truncated JSON", good[:len(good)-1], "invalid_json"),
		bad("truncated in a name", `{"descr`, "invalid_json"),
		bad("form encoding sent as JSON", "amount=2000&currency=usd", "invalid_json"),
		bad("array", "["+good+"]", "invalid_json"),
		bad("string", `"`+strings.ReplaceAll(good, `"`, `\"`)+`"`, "invalid_json"),
		bad("number", "2000", "invalid_json"),
		bad("null", "null", "invalid_json"),
		bad("boolean", "true", "invalid_json"),
		bad("two objects", good+good, "invalid_json"),
		bad("trailing garbage", good+"x", "invalid_json"),
		bad("byte order mark", "\ufeff"+good, "invalid_json"),
		bad("NUL byte in the JSON text", "{\x00"+good[1:], "invalid_json"),
		bad("invalid UTF-8 outside strings", good+"\xff", "invalid_json"),
		{name: "1 MiB body", body: render(with(r.base, "padding", `"`+strings.Repeat("a", 1<<20)+`"`)), status: 413, codes: []string{"payload_too_large"}},
		{name: "a body just over the limit", body: render(with(r.base, "padding", `"`+strings.Repeat("a", max(r.bodyLimit, 128<<10))+`"`)), status: 413, codes: []string{"payload_too_large"}},
		{name: "1 MiB of whitespace", body: good + strings.Repeat(" ", 1<<20), status: 413, codes: []string{"payload_too_large"}},
		bad("10,000 nested arrays", render(with(r.base, "nested", nested("[", "]"))), "invalid_json", "parameter_invalid"),
		bad("10,000 nested objects", render(with(r.base, "nested", nested(`{"a":`, "}"))), "invalid_json", "parameter_invalid"),
		{name: "unknown field", body: render(with(r.base, "bogus", "1")), status: 400, codes: []string{"parameter_invalid"}, param: "bogus"},
		{name: "unknown field only", body: `{"bogus":true}`, status: 400, codes: []string{"parameter_invalid"}, param: "bogus"},
		{name: "read-only field", body: render(with(r.base, "id", `"x"`)), status: 400, codes: []string{"parameter_invalid"}, param: "id"},
		{name: "wrong Content-Type", body: good, headers: []string{"Content-Type", "text/plain"}, status: 415, codes: []string{"unsupported_media_type"}},
		{name: "form Content-Type", body: good, headers: []string{"Content-Type", "application/x-www-form-urlencoded"}, status: 415, codes: []string{"unsupported_media_type"}},
		{name: "no Content-Type", body: good, headers: []string{"Content-Type", ""}, status: 415, codes: []string{"unsupported_media_type"}},
		{name: "malformed Content-Type", body: good, headers: []string{"Content-Type", "application/json; charset"}, status: 415, codes: []string{"unsupported_media_type"}},
	}
	// A duplicate name hides a second value from whatever reads the body
	// another way (a log, a proxy, a signature): refused, at any depth.
	if len(r.base) > 0 {
		f := r.base[0]
		cases = append(cases, abuseCase{name: "duplicate " + f.name, body: render(append(slices.Clone(r.base), f)),
			status: 400, codes: []string{"parameter_invalid"}, param: f.name})
		cases = append(cases, abuseCase{name: "duplicate in a nested object", body: render(with(r.base, "metadata", `{"a":"1","a":"2"}`)),
			status: 400, codes: []string{"parameter_invalid"}, param: "metadata.a"})
	}
	if !r.emptyIsValid {
		cases = append(cases,
			abuseCase{name: "empty body", body: "", headers: []string{"Content-Type", "application/json"}, status: 400, codes: []string{"parameter_missing"}},
			abuseCase{name: "empty object", body: "{}", status: 400, codes: []string{"parameter_missing"}},
		)
	}
	for _, f := range []string{r.str, r.num} {
		if f == "" {
			continue
		}
		field := func(name, raw string, codes ...string) abuseCase {
			return abuseCase{name: name + " in " + f, body: render(with(r.base, f, raw)), status: 400, codes: codes, param: f}
		}
		cases = append(cases,
			abuseCase{name: "upper-case " + f, body: render(append(withoutField(r.base, f), renamed(r.base, f, strings.ToUpper(f)))),
				status: 400, codes: []string{"parameter_invalid"}, param: strings.ToUpper(f)},
			field("object", `{"a":1}`, "parameter_invalid"),
			field("array", `["a"]`, "parameter_invalid"),
			field("nested array", nested("[", "]"), "invalid_json", "parameter_invalid"),
		)
		if f == r.str {
			cases = append(cases,
				field("number", "123", "parameter_invalid"),
				field("boolean", "true", "parameter_invalid"),
				field("1e400", "1e400", "parameter_invalid"),
				field("escaped NUL", `"a\u0000b"`, "parameter_invalid"),
				field("raw NUL", "\"a\x00b\"", "invalid_json"),
				field("invalid UTF-8", "\"a\xff\xfeb\"", "invalid_json"),
			)
		} else {
			cases = append(cases,
				field("string", `"100"`, "parameter_invalid"),
				field("1e400", "1e400", "parameter_invalid"),
				field("2^63", "9223372036854775808", "parameter_invalid"),
				field("-2^63-1", "-9223372036854775809", "parameter_invalid"),
				field("-0", "-0", "parameter_invalid"),
				field("1.5", "1.5", "parameter_invalid"),
				field("0", "0", "parameter_invalid"),
				field("-1", "-1", "parameter_invalid"),
			)
		}
	}
	return cases
}

func withoutField(base []field, name string) []field {
	return slices.DeleteFunc(slices.Clone(base), func(f field) bool { return f.name == name })
}

// renamed is base's field name (which must exist) under another name.
func renamed(base []field, name, to string) field {
	i := slices.IndexFunc(base, func(f field) bool { return f.name == name })
	return field{to, base[i].raw}
}

// send answers one request. Transport errors are returned: a body above the
// server's read limit may be refused by closing the connection under the
// client, which then sometimes sees a reset instead of the 413. The answer
// is checked against the OpenAPI spec unless unlisted: the contract does not
// list the 413 and 415 every body can get for void, rotate_secret, test and
// retry, and there the error body is checked here instead.
func (h *harness) send(t *testing.T, unlisted bool, method, path, body string, headers ...string) (response, error) {
	t.Helper()
	req, err := http.NewRequest(method, h.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
			continue
		}
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, err
	}
	r := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	if !unlisted {
		h.spec.Check(t, req, resp, raw)
	} else if r.status >= 400 && (resp.Header.Get("Content-Type") != "application/json; charset=utf-8" || resp.Header.Get("X-Request-Id") == "") {
		t.Errorf("%s %s -> %d: Content-Type %q, X-Request-Id %q", method, path, r.status, resp.Header.Get("Content-Type"), resp.Header.Get("X-Request-Id"))
	}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		t.Errorf("%s %s -> %d: body is not JSON: %.300s", method, path, r.status, raw)
	}
	return r, nil
}

// readLimit is what the server reads of a body before refusing it unread
// (httpapi.readLimit); beyond it the 413 may be lost to a connection reset.
const readLimit = 4 * httpapi.BodyLimit

// sendAbusive sends one spoiled body. Above readLimit a transport error is
// tolerated (the connection was refused under the client, which is not a
// 5xx and stores nothing) and reported as reset; below it fails the test.
func (h *harness) sendAbusive(t *testing.T, unlisted bool, method, path, body string, headers ...string) (r response, reset bool) {
	t.Helper()
	r, err := h.send(t, unlisted, method, path, body, headers...)
	if err != nil && len(body) <= readLimit {
		t.Fatalf("%s %s (%d bytes): %v", method, path, len(body), err)
	}
	return r, err != nil
}

// snapshot is a digest of every table's content.
func (h *harness) snapshot(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	rows, err := h.db.Pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(tables) < 5 {
		t.Fatalf("only %d tables: the query is wrong", len(tables))
	}
	out := map[string]string{}
	for _, tb := range tables {
		var n int
		var digest string
		q := fmt.Sprintf(`SELECT count(*), coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM %q t`, tb)
		if err := h.db.Pool.QueryRow(ctx, q).Scan(&n, &digest); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		out[tb] = fmt.Sprintf("%d rows, md5 %s", n, digest)
	}
	return out
}

// docs/reliability.md B2: every route that takes a body answers malformed,
// oversized, deeply nested, unknown-field, duplicate-key, wrongly typed and
// wrongly labelled bodies with a 4xx in the contract's error body, never a
// 5xx, and stores nothing. The routes come from the app itself, so a new
// route that may take a body fails here until it has a row below.
func TestAbusiveBodies(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(env map[string]string) {
		paymentsEnv(env)
		env["RATE_LIMIT_LOGIN"] = "100000/1m"
	})
	a := h.account("abuse@example.com")
	w := h.worker(t, &providertest.Fake{})
	authorized := h.authorizedCharge(t, w, a.secret, 2000)
	captured := h.capturedCharge(t, w, a.secret, 2000)
	r := h.do("POST", "/v1/me/webhook_endpoints", `{"url":"http://127.0.0.1:9/hook","events":["charge.captured"]}`, bearer(a.secret)...)
	want(t, r, 201, "")
	endpoint := obj(r.body["webhook_endpoint"])["id"].(string)
	r = h.do("POST", "/v1/customers", `{"name":"Abuse"}`, bearer(a.secret)...)
	want(t, r, 201, "")
	customer := r.body["id"].(string)
	r = h.do("POST", "/v1/connectors", `{"provider":"sandbox","name":"Abuse"}`, bearer(a.secret)...)
	want(t, r, 201, "")
	connector := r.body["id"].(string)
	d := "2026-11-27"
	r = h.do("POST", "/v1/reconciliations", `{"connector":"`+connector+`","report":"`+reconcile.Header+`\nsbx_ch_abuse,charge,USD,100,33,67,`+d+`\n"}`, bearer(a.secret)...)
	want(t, r, 201, "")
	reconciliation := r.body["id"].(string)
	r = h.do("GET", "/v1/reconciliations/"+reconciliation+"/exceptions", "", bearer(a.secret)...)
	want(t, r, 200, "")
	exception := obj(r.body["data"].([]any)[0])["id"].(string)

	r = h.do("POST", "/v1/me/members", `{"email":"teammate@example.com","role":"viewer"}`, bearer(a.token)...)
	want(t, r, 201, "")
	member := obj(r.body["member"])["id"].(string)

	card := `{"number":"4242424242424242","exp_month":12,"exp_year":` + fmt.Sprint(expYear) + `,"cvc":"123"}`
	routes := map[string]bodyRoute{
		"POST /v1/auth/setup": {path: "/v1/auth/setup",
			base: []field{{"token", `"made-up-token"`}, {"password", `"correct horse battery"`}}, str: "token"},
		"POST /v1/me/members": {path: "/v1/me/members", auth: bearer(a.token),
			base: []field{{"email", `"someone@example.com"`}, {"role", `"developer"`}}, str: "email"},
		"PATCH /v1/me/members/:id": {path: "/v1/me/members/" + member, auth: bearer(a.token),
			base: []field{{"role", `"support"`}}, str: "role"},
		"POST /v1/auth/login": {path: "/v1/auth/login",
			base: []field{{"email", `"abuse@example.com"`}, {"password", `"correct horse battery"`}}, str: "email"},
		"POST /v1/auth/mfa": {path: "/v1/auth/mfa",
			base: []field{{"challenge", `"mfa_made-up"`}, {"code", `"123456"`}}, str: "code"},
		"POST /v1/me/mfa/totp": {path: "/v1/me/mfa/totp", auth: bearer(a.token), base: []field{}, emptyIsValid: true},
		"POST /v1/me/mfa/totp/confirm": {path: "/v1/me/mfa/totp/confirm", auth: bearer(a.token),
			base: []field{{"code", `"123456"`}}, str: "code"},
		"PATCH /v1/me/settings": {path: "/v1/me/settings", auth: bearer(a.token), base: []field{{"mfa_required", "false"}}},
		"POST /v1/me/api_keys": {path: "/v1/me/api_keys", auth: bearer(a.token),
			base: []field{{"environment", `"sandbox"`}, {"name", `"ci"`}}, str: "name", emptyIsValid: true},
		"POST /v1/me/api_keys/:id/roll": {path: "/v1/me/api_keys/" + a.keyID + "/roll", auth: bearer(a.token),
			base: []field{{"expires_in", "60"}}, emptyIsValid: true}, // 0 is valid: no amount-like cases
		"POST /v1/charges": {path: "/v1/charges", auth: bearer(a.secret),
			base: []field{{"amount", "2000"}, {"currency", `"usd"`}, {"payment_method", `"card"`}, {"card", card}, {"description", `"order 1"`}},
			str:  "description", num: "amount"},
		"POST /v1/tokens": {path: "/v1/tokens", auth: bearer(h.publicKeyOf(a.secret)), base: []field{{"card", card}}},
		"POST /elements/v1/next_action": {path: "/elements/v1/next_action", auth: bearer(h.publicKeyOf(a.secret)),
			base: []field{{"charge", `"` + authorized + `"`}, {"tokens", `["ctok_unknown"]`}}, str: "charge"},
		"POST /v1/charges/:id/capture": {path: "/v1/charges/" + authorized + "/capture", auth: bearer(a.secret),
			base: []field{{"amount", "1000"}}, num: "amount", emptyIsValid: true},
		"POST /v1/charges/:id/void": {path: "/v1/charges/" + authorized + "/void", auth: bearer(a.secret),
			base: []field{}, emptyIsValid: true},
		"POST /v1/refunds": {path: "/v1/refunds", auth: bearer(a.secret),
			base: []field{{"charge", `"` + captured + `"`}, {"amount", "500"}, {"reason", `"requested_by_customer"`}}, str: "reason", num: "amount"},
		"POST /v1/me/webhook_endpoints": {path: "/v1/me/webhook_endpoints", auth: bearer(a.secret),
			base: []field{{"url", `"http://127.0.0.1:9/other"`}, {"events", `["charge.captured"]`}, {"description", `"second"`}}, str: "description"},
		"PATCH /v1/me/webhook_endpoints/:id": {path: "/v1/me/webhook_endpoints/" + endpoint, auth: bearer(a.secret),
			base: []field{{"description", `"renamed"`}, {"active", "false"}}, str: "description", emptyIsValid: true},
		"POST /v1/me/webhook_endpoints/:id/rotate_secret": {path: "/v1/me/webhook_endpoints/" + endpoint + "/rotate_secret", auth: bearer(a.secret),
			base: []field{}, emptyIsValid: true},
		"POST /v1/me/webhook_endpoints/:id/test": {path: "/v1/me/webhook_endpoints/" + endpoint + "/test", auth: bearer(a.secret),
			base: []field{}, emptyIsValid: true},
		"POST /v1/webhook_deliveries/:id/retry": {path: "/v1/webhook_deliveries/0190f4b6-3c2a-7d4e-8f00-000000000001/retry", auth: bearer(a.secret),
			base: []field{}, emptyIsValid: true},
		"POST /v1/me/webhook_client_certificate/rotate": {path: "/v1/me/webhook_client_certificate/rotate", auth: bearer(a.secret),
			base: []field{}, emptyIsValid: true},
		"POST /v1/me/webhook_endpoints/:id/recover": {path: "/v1/me/webhook_endpoints/" + endpoint + "/recover", auth: bearer(a.secret),
			base: []field{{"since", `"2026-01-01T00:00:00Z"`}}, str: "since"},
		// No dispute exists (only a provider opens one): every spoiled
		// body is refused before the dispute is looked up.
		"POST /v1/disputes/:id": {path: "/v1/disputes/dp_06h21dscqtupdc4b6fl6b6lb3o", auth: bearer(a.secret),
			base: []field{{"evidence", `{"uncategorized_text":"x"}`}, {"submit", "false"}}},
		"POST /v1/disputes/:id/close": {path: "/v1/disputes/dp_06h21dscqtupdc4b6fl6b6lb3o/close", auth: bearer(a.secret),
			base: []field{}, emptyIsValid: true},
		"POST /v1/payouts": {path: "/v1/payouts", auth: bearer(a.secret),
			base: []field{{"amount", "100"}, {"currency", `"usd"`}, {"description", `"by hand"`}}, str: "description", num: "amount"},
		"POST /v1/reconciliations": {path: "/v1/reconciliations", auth: bearer(a.secret), bodyLimit: 1 << 20,
			base: []field{{"connector", `"` + connector + `"`}, {"report", `"` + reconcile.Header + `\nsbx_ch_1,charge,USD,100,33,67,` + d + `\n"`}},
			str:  "report"},
		"POST /v1/reconciliations/:id/exceptions/:exc/resolve": {path: "/v1/reconciliations/" + reconciliation + "/exceptions/" + exception + "/resolve",
			auth: bearer(a.secret), base: []field{{"action", `"accept"`}, {"note", `"checked"`}}, str: "note"},
		"POST /v1/customers": {path: "/v1/customers", auth: bearer(a.secret),
			base: []field{{"email", `"abuse@example.com"`}, {"name", `"Abuse"`}, {"description", `"d"`}}, str: "name", emptyIsValid: true},
		"PATCH /v1/customers/:id": {path: "/v1/customers/" + customer, auth: bearer(a.secret),
			base: []field{{"description", `"renamed"`}, {"name", "null"}}, str: "description", emptyIsValid: true},
		"POST /v1/customers/:id/payment_methods": {path: "/v1/customers/" + customer + "/payment_methods", auth: bearer(a.secret),
			base: []field{{"card", card}}},
		"POST /v1/connectors": {path: "/v1/connectors", auth: bearer(a.secret),
			base: []field{{"provider", `"sandbox"`}, {"name", `"Second"`}, {"sandbox", `{"latency_ms":10}`}}, str: "name"},
		"PATCH /v1/connectors/:id": {path: "/v1/connectors/" + connector, auth: bearer(a.secret),
			base: []field{{"name", `"Renamed"`}, {"enabled", "false"}}, str: "name", emptyIsValid: true},
		"POST /v1/provider_notifications/:connector_id": {path: "/v1/provider_notifications/" + connector,
			base: []field{{"id", `"evt_1"`}, {"type", `"payment_intent.succeeded"`}}, str: "type", signed: true},
		"PUT /v1/routing": {path: "/v1/routing", auth: bearer(a.secret),
			base: []field{{"default", `{"connectors":["` + connector + `"]}`}, {"rules", `[{"if":{"amount_gte":100},"then":{"connectors":["` + connector + `"]}}]`}}},
	}
	if a.keyID == "" {
		t.Fatal("no key")
	}

	seen := map[string]bool{}
	sent, resets := 0, 0
	for _, rt := range h.app.GetRoutes(true) {
		switch rt.Method {
		case fiber.MethodPost, fiber.MethodPut, fiber.MethodPatch:
		default:
			continue
		}
		name := rt.Method + " " + rt.Path
		if seen[name] || isDashboardPath(rt.Path) || isChallengePath(rt.Path) { // forms, not JSON: TestDashboardHostileForms, TestChallengeLinks
			continue
		}
		seen[name] = true
		br, ok := routes[name]
		if !ok {
			t.Errorf("%s may take a body and has no abuse cases: add it to the table", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			fivexx := 0
			for _, c := range abuseCases(br) {
				before := h.snapshot(t)
				headers := append(slices.Clone(br.auth), c.headers...)
				r, reset := h.sendAbusive(t, br.unlisted, rt.Method, br.path, c.body, headers...)
				sent++
				label := fmt.Sprintf("%s (%d bytes)", c.name, len(c.body))
				if r.status >= 500 {
					fivexx++
				}
				switch {
				case reset:
					resets++
				case br.signed && (r.status < 400 || r.status > 499):
					t.Errorf("%s: got %d %s, want 4xx (an unsigned body)\nbody: %.300s", label, r.status, r.errCode(), r.raw)
				case br.signed:
				case r.status != c.status || !slices.Contains(c.codes, r.errCode()):
					t.Errorf("%s: got %d %s, want %d %v\nbody: %.300s", label, r.status, r.errCode(), c.status, c.codes, r.raw)
				case r.errField("message") == "" || r.errField("request_id") == "":
					t.Errorf("%s: the error has no message or request id: %s", label, r.raw)
				case c.param != "" && r.errCode() == "parameter_invalid" && r.errField("param") != c.param:
					t.Errorf("%s: param %q, want %q: %s", label, r.errField("param"), c.param, r.raw)
				}
				if after := h.snapshot(t); !maps.Equal(before, after) {
					t.Errorf("%s: a refused body changed the database:\n%s", label, diff(before, after))
				}
			}
			if fivexx > 0 {
				t.Errorf("%d answers were 5xx", fivexx)
			}
		})
	}
	t.Logf("%d spoiled bodies on %d routes: all 4xx, or for %d bodies above the read limit a connection reset", sent, len(seen), resets)
	for name := range routes {
		if !seen[name] {
			t.Errorf("the table has %s, which the app does not serve", name)
		}
	}
}

func diff(before, after map[string]string) string {
	var out []string
	for k, v := range after {
		if before[k] != v {
			out = append(out, fmt.Sprintf("  %s: %s -> %s", k, before[k], v))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}
