package e2e

// docs/reliability.md B5 / I6: after a stack's life its process logs, a dump of
// its database and every value in its Redis must hold no card number, no
// secret API key and no webhook secret.
//
// What counts as a hit:
//
//   - A card number: a run of 13 to 19 digits, the digits optionally
//     grouped by single spaces or dashes ("4242 4242 4242 4242"), that is a
//     whole token (no letter, digit or underscore right before or after it,
//     so runs inside hex digests, base32 ids or longer numbers do not count),
//     passes the Luhn check, and starts with a known card IIN: 4 (Visa),
//     51-55 and 2221-2720 (Mastercard), 34 and 37 (Amex), 6011 and 65
//     (Discover), 35 (JCB), 30, 36 and 38 (Diners). UUIDs cannot match: their
//     all-digit groups joined by dashes make 20 or more digits, and the group
//     after the version starts with 8 or 9, no IIN. Timestamps are broken up
//     by colons, letters and dots; Unix times start with 1, no IIN.
//   - A secret API key: sk_test_ or sk_live_ followed by at least 16
//     characters of its base62 random part (the keys have 32). Public keys
//     (pk_...) are not secret and key ids are key_...; neither counts, nor
//     does the bare prefix in a message.
//   - A webhook secret: whsec_ followed by at least 16 base64 characters.
//
// A hit names where it was found and shows only a prefix of what matched.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatehouse-pay/gatehouse/internal/charges"
)

var (
	apiSecretRE = regexp.MustCompile(`sk_(?:test|live)_[0-9A-Za-z]{16,}`)
	whsecRE     = regexp.MustCompile(`whsec_[0-9A-Za-z+/]{16,}`)
)

// secretHit is one leak: its kind, where it is, and a redacted prefix.
type secretHit struct {
	kind, where, redacted string
}

func (h secretHit) String() string { return h.kind + " " + h.redacted + " in " + h.where }

// knownIIN reports whether the digits start like a card of a major network.
func knownIIN(d string) bool {
	p2, _ := strconv.Atoi(d[:2])
	p4, _ := strconv.Atoi(d[:4])
	switch {
	case d[0] == '4':
		return true
	case p2 >= 51 && p2 <= 55, p4 >= 2221 && p4 <= 2720: // Mastercard
		return true
	case p2 == 34 || p2 == 37: // Amex
		return true
	case p4 == 6011 || p2 == 65: // Discover
		return true
	case p2 == 35 || p2 == 30 || p2 == 36 || p2 == 38: // JCB, Diners
		return true
	}
	return false
}

func isWordByte(b byte) bool {
	return b == '_' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
}

// cardNumbers returns the card numbers in data as redacted strings.
func cardNumbers(data []byte) []string {
	var out []string
	for start, end := range digitRuns(data) {
		if start > 0 && isWordByte(data[start-1]) || end < len(data) && isWordByte(data[end]) {
			continue
		}
		// Digit groups of a dash-joined token, such as the first three groups
		// of a UUID whose fourth group starts with a letter, are not a card.
		if start > 1 && data[start-1] == '-' && isWordByte(data[start-2]) ||
			end+1 < len(data) && data[end] == '-' && isWordByte(data[end+1]) {
			continue
		}
		digits := make([]byte, 0, end-start)
		for _, b := range data[start:end] {
			if '0' <= b && b <= '9' {
				digits = append(digits, b)
			}
		}
		d := string(digits)
		if len(d) < 13 || len(d) > 19 || !charges.Luhn(d) || !knownIIN(d) {
			continue
		}
		out = append(out, fmt.Sprintf("%s... (%d digits)", d[:4], len(d)))
	}
	return out
}

// digitRuns yields the start and end of each maximal run of digits with
// single space or dash separators ("4242 4242-4242"), left to right; the
// token and length rules of cardNumbers are applied to each. It is the
// regular expression [0-9](?:[ -]?[0-9])* found all over data, in one pass:
// the expression took a backtracking pass over the rest of the line for
// every run, and the scans of a stack's logs and dump were most of the
// test process's CPU.
func digitRuns(data []byte) iter.Seq2[int, int] {
	isDigit := func(b byte) bool { return '0' <= b && b <= '9' }
	return func(yield func(int, int) bool) {
		for start := 0; start < len(data); {
			if !isDigit(data[start]) {
				start++
				continue
			}
			end := start + 1
			for end < len(data) {
				if isDigit(data[end]) {
					end++
				} else if (data[end] == ' ' || data[end] == '-') && end+1 < len(data) && isDigit(data[end+1]) {
					end += 2
				} else {
					break
				}
			}
			if !yield(start, end) {
				return
			}
			start = end
		}
	}
}

// scanSecrets returns the leaks in data, each named after where with the
// line it is on.
func scanSecrets(where string, data []byte) []secretHit {
	var hits []secretHit
	line := 0
	for rest := data; len(rest) > 0; {
		line++
		var l []byte
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			l, rest = rest[:i], rest[i+1:]
		} else {
			l, rest = rest, nil
		}
		at := func() string { return fmt.Sprintf("%s line %d", where, line) }
		for _, c := range cardNumbers(l) {
			hits = append(hits, secretHit{"card number", at(), c})
		}
		if bytes.Contains(l, []byte("sk_")) {
			for _, m := range apiSecretRE.FindAll(l, -1) {
				hits = append(hits, secretHit{"secret API key", at(), string(m[:10]) + "..."})
			}
		}
		if bytes.Contains(l, []byte("whsec_")) {
			for _, m := range whsecRE.FindAll(l, -1) {
				hits = append(hits, secretHit{"webhook secret", at(), string(m[:8]) + "..."})
			}
		}
	}
	return hits
}

// pgDumpPath prefers the pg_dump of the server's major version.
func pgDumpPath() (string, error) {
	if p := "/usr/lib/postgresql/15/bin/pg_dump"; fileExists(p) {
		return p, nil
	}
	return exec.LookPath("pg_dump")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// dumpDatabase is pg_dump --data-only of the database at url. Each COPY
// block's rows are prefixed with their table so that hits name it.
func dumpDatabase(ctx context.Context, url string) ([]byte, error) {
	path, err := pgDumpPath()
	if err != nil {
		return nil, err
	}
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "--data-only", "--no-owner", "--no-privileges", "--dbname="+url)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %v: %s", filepath.Base(path), err, strings.TrimSpace(errOut.String()))
	}
	return out.Bytes(), nil
}

// dumpRedis renders every key of every database of the server as
// "db <n> key <k> (<type>): <value>" lines: strings, hashes, lists, sets,
// sorted sets and streams, values as stored (binary values included).
func dumpRedis(ctx context.Context, c *redis.Client) ([]byte, int, error) {
	info, err := c.Info(ctx, "keyspace").Result()
	if err != nil {
		return nil, 0, err
	}
	var dbs []int
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if name, _, ok := strings.Cut(sc.Text(), ":"); ok && strings.HasPrefix(name, "db") {
			if n, err := strconv.Atoi(strings.TrimPrefix(name, "db")); err == nil {
				dbs = append(dbs, n)
			}
		}
	}
	var b bytes.Buffer
	keys := 0
	for _, n := range dbs {
		opts := *c.Options()
		opts.DB = n
		dbc := redis.NewClient(&opts)
		iter := dbc.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			keys++
			typ, vals, err := redisValues(ctx, dbc, k)
			if err != nil {
				dbc.Close()
				return nil, keys, err
			}
			for _, v := range vals {
				// One line per value, so a hit names its key; newlines inside
				// a value would only split it.
				fmt.Fprintf(&b, "db %d key %q (%s): %s\n", n, k, typ, strings.ReplaceAll(v, "\n", " "))
			}
		}
		err := iter.Err()
		dbc.Close()
		if err != nil {
			return nil, keys, err
		}
	}
	return b.Bytes(), keys, nil
}

// scanDump scans a pg_dump, naming the table of each hit from the COPY
// header above it.
func scanDump(dump []byte) []secretHit {
	var hits []secretHit
	table := "(no table)"
	for i, l := range bytes.Split(dump, []byte("\n")) {
		if t, ok := bytes.CutPrefix(l, []byte("COPY ")); ok {
			if j := bytes.IndexAny(t, " ("); j > 0 {
				table = string(t[:j])
			}
			continue
		}
		for _, h := range scanSecrets(fmt.Sprintf("pg_dump table %s", table), l) {
			h.where = fmt.Sprintf("pg_dump table %s line %d", table, i+1)
			hits = append(hits, h)
		}
	}
	return hits
}

// scanStack scans the stack's logs, database and Redis and fails t on any
// hit. It runs from a t.Cleanup registered by startStackWith after Redis
// started, so it runs after the binaries were stopped (their logs are
// complete) and before Redis is stopped and the database dropped.
func (s *stack) scanStack(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var hits []secretHit
	logBytes := 0
	for _, w := range s.workers {
		out := []byte(w.out.Tail(1 << 62))
		logBytes += len(out)
		hits = append(hits, scanSecrets(w.name+" log", out)...)
	}
	for _, p := range s.apis {
		out := []byte(p.Out.Tail(1 << 62))
		logBytes += len(out)
		hits = append(hits, scanSecrets(p.Name+" log", out)...)
	}
	redisLog := []byte(s.redis.logs())
	hits = append(hits, scanSecrets("redis-server log", redisLog)...)

	dump, err := dumpDatabase(ctx, s.db.URL)
	if err != nil {
		t.Errorf("secret scan: cannot dump the database: %v", err)
	}
	hits = append(hits, scanDump(dump)...)

	redisKeys := 0
	var redisDump []byte
	if s.redis.down() {
		t.Logf("secret scan: Redis is stopped at the end of the test; its data is gone and not scanned")
	} else {
		for _, c := range s.redis.primaries(t) {
			b, n, err := dumpRedis(ctx, c)
			if err != nil {
				t.Errorf("secret scan: cannot read Redis %s: %v", c.Options().Addr, err)
			}
			redisDump, redisKeys = append(redisDump, b...), redisKeys+n
		}
	}
	hits = append(hits, scanSecrets("Redis", redisDump)...)

	for _, h := range hits {
		t.Errorf("secret scan: %s", h)
	}
	t.Logf("secret scan (card numbers, sk_test_/sk_live_ keys, whsec_ secrets): logs %d bytes, pg_dump %d bytes, Redis %d keys (%d bytes): %d hits",
		logBytes+len(redisLog), len(dump), redisKeys, len(redisDump), len(hits))
}

func TestSecretScanner(t *testing.T) {
	parallel(t)
	secret := "sk_test_" + "0123456789ABCDEFGHIJabcdefghijkl"
	whsec := "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	found := []struct{ name, text, kind string }{
		{"visa in JSON", `{"card":{"number":"4242424242424242"}}`, "card number"},
		{"visa with spaces", `number=4242 4242 4242 4242 exp=12/30`, "card number"},
		{"mastercard with dashes", `card 5555-5555-5555-4444.`, "card number"},
		{"2-series mastercard", `"2223003122003222"`, "card number"},
		{"amex", `pan:378282246310005`, "card number"},
		{"discover", `6011111111111117`, "card number"},
		{"diners 14 digits", `"30569309025904"`, "card number"},
		{"jcb", `(3530111333300000)`, "card number"},
		{"visa 19 digits", `4111111111111111003`, "card number"},
		{"secret key", "Authorization: Bearer " + secret, "secret API key"},
		{"live key", "sk_live_" + secret[8:], "secret API key"},
		{"webhook secret", `"webhook_secret":"` + whsec + `"`, "webhook secret"},
	}
	for _, tc := range found {
		hits := scanSecrets("test", []byte("prefix line\n"+tc.text))
		if len(hits) != 1 || hits[0].kind != tc.kind || hits[0].where != "test line 2" {
			t.Errorf("%s: scan(%q) = %v, want one %s on line 2", tc.name, tc.text, hits, tc.kind)
			continue
		}
		if s := hits[0].String(); strings.Contains(s, "4242424242") || strings.Contains(s, secret) || strings.Contains(s, whsec) ||
			strings.Contains(s, "1111111111") || strings.Contains(s, "5555555555") {
			t.Errorf("%s: the report %q shows the secret", tc.name, s)
		}
	}
	clean := []struct{ name, text string }{
		{"uuid v7", "0190f4b6-3c2a-7d4e-8f00-000000000001 01a201a2-ab92-7021-8412-345678901234"},
		{"uuid all digits", "12345678-1234-4123-8123-123456789012"},
		{"uuid v4", "42424242-4242-4242-9242-424242424242"},
		{"uuid v4 with a Luhn-valid head", `"request_id":"41234567-4711-4120-a123-123456789abc"`},
		{"timestamps", `2026-11-22T05:02:46.036Z 2026-11-22 05:02:46.036+00 1763788966036 1763788966036000000 ts=1763788966`},
		{"prefixed ids", "mer_06h038l52hrq56uotce84nmmn8 key_06h038rautv058n4blr5p4j648 we_4242424242424242424242abcd"},
		{"last4 and fingerprint", `"last4":"4242","fingerprint":"779031aae643b39467074b5260b3837f"`},
		{"digits in hex", "trace_id=a4242424242424242b span=4242424242424242f0"},
		{"luhn-invalid visa", "4242424242424241"},
		{"unknown IIN", "7992739871300000 1234567812345670"},
		{"too short", "424242424242"},
		{"too long", "42424242424242424242"},
		{"amounts and durations", "amount=2000 duration_ms=12.345 count 4242 4242"},
		{"public key", "pk_test_0123456789ABCDEFGHIJabcd"},
		{"key id and last4", `"id":"key_06h038rautv058n4blr5p4j648","secret_key_last4":"ijkl"`},
		{"bare prefixes", "keys start with sk_test_; secrets with whsec_; sk_test_short"},
	}
	for _, tc := range clean {
		if hits := scanSecrets("test", []byte(tc.text)); len(hits) != 0 {
			t.Errorf("%s: scan(%q) = %v, want none", tc.name, tc.text, hits)
		}
	}
	dump := []byte("COPY public.charges (id, description) FROM stdin;\n0190f4b6-3c2a-7d4e-8f00-000000000001\tpaid with 4000 0566 5566 5556\n\\.\n")
	if hits := scanDump(dump); len(hits) != 1 || hits[0].where != "pg_dump table public.charges line 2" {
		t.Errorf("scanDump = %v, want one hit in public.charges line 2", hits)
	}
}

// TestDigitRunsAsTheExpression: digitRuns finds what the regular
// expression [0-9](?:[ -]?[0-9])* finds, on random text of digits,
// separators and other bytes.
func TestDigitRunsAsTheExpression(t *testing.T) {
	re := regexp.MustCompile(`[0-9](?:[ -]?[0-9])*`)
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "0123456789  --a_\n"
	for n := range 5000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		var got [][]int
		for start, end := range digitRuns(b) {
			got = append(got, []int{start, end})
		}
		if want := re.FindAllIndex(b, -1); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("case %d %q: digitRuns %v, the expression %v", n, b, got, want)
		}
	}
}
