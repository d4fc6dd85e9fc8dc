package main

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// The floor is the least a server can do for one durable charge: decode the
// JSON, check the key in memory, one Redis script for the rate limit and the
// key's revocation, one Postgres statement writing the idempotency record,
// the charge, its event and its outbox row, and encode the answer. It runs as
// "bench floor" in its own process so its CPU is read like the API's.

// floorSchema holds the floor's tables. "copy" makes them copies of the
// project's (LIKE ... INCLUDING ALL: same columns, defaults, checks and
// indexes; no foreign keys), so the comparison is of what the application
// does around the same rows; "lean" keeps the columns and primary keys only,
// so the comparison also charges the project for its schema.
const floorSchema = "bench_floor"

var floorTables = map[string]string{"charges": "id", "events": "id", "outbox": "task_id", "idempotency_keys": "merchant_id, key"}

func floorSetupSQL(kind string) []string {
	stmts := []string{"CREATE SCHEMA " + floorSchema}
	for _, t := range []string{"charges", "events", "outbox", "idempotency_keys"} {
		if kind == "lean" {
			stmts = append(stmts,
				fmt.Sprintf("CREATE TABLE %s.%s (LIKE public.%s INCLUDING DEFAULTS)", floorSchema, t, t),
				fmt.Sprintf("ALTER TABLE %s.%s ADD PRIMARY KEY (%s)", floorSchema, t, floorTables[t]))
			continue
		}
		stmts = append(stmts, fmt.Sprintf("CREATE TABLE %s.%s (LIKE public.%s INCLUDING ALL)", floorSchema, t, t))
	}
	return stmts
}

// floorInsert is the floor's one round trip, shaped like the project's.
const floorInsert = `
WITH idem AS (
	INSERT INTO ` + floorSchema + `.idempotency_keys (merchant_id, key, fingerprint, status, response)
	VALUES ($2::text, $15::text, $16::bytea, 201, $17::bytea)
	ON CONFLICT DO NOTHING
	RETURNING 1
), ch AS (
	INSERT INTO ` + floorSchema + `.charges (id, merchant_id, environment, amount, currency, status, payment_method, capture,
		card_brand, card_last4, card_exp_month, card_exp_year, card_fingerprint, card_sealed, provider, description,
		metadata, created_at, updated_at)
	SELECT $1::uuid, $2::text, 'sandbox', $3::bigint, $4::text, 'created', 'card', $5::bool, 'visa', $6::text,
		$7::int, $8::int, $9::text, $10::bytea, 'sandbox', $11::text, $12::jsonb, $13::timestamptz, $13::timestamptz
	FROM idem
	RETURNING id
), ev AS (
	INSERT INTO ` + floorSchema + `.events (id, merchant_id, environment, type, body, created_at)
	SELECT $14::uuid, $2::text, 'sandbox', 'charge.created', $18::jsonb, $13::timestamptz FROM ch
), ob AS (
	INSERT INTO ` + floorSchema + `.outbox (task_id, task_type, ref_id)
	SELECT 'charge:authorize:' || ch.id::text, 'charge:authorize', ch.id FROM ch
)
SELECT count(*) FROM ch`

// floorLimit is a tiny sliding-window counter (this window's count plus the
// previous window's, weighted by how much of it still overlaps) that also
// refuses a revoked key: one EVALSHA covers limit and revocation.
const floorLimit = `
if redis.call('EXISTS', KEYS[2]) == 1 then return {-1, 0} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[2])
local slot = math.floor(now / window)
local cur = KEYS[1] .. ':' .. slot
local n = redis.call('INCR', cur)
if n == 1 then redis.call('PEXPIRE', cur, window * 2) end
local prev = tonumber(redis.call('GET', KEYS[1] .. ':' .. (slot - 1)) or '0')
local est = math.floor(prev * (window - now % window) / window) + n
if est > tonumber(ARGV[1]) then redis.call('DECR', cur) return {0, est} end
return {1, est}`

type floorRequest struct {
	Amount        *int64            `json:"amount"`
	Currency      string            `json:"currency"`
	PaymentMethod string            `json:"payment_method"`
	Card          floorCard         `json:"card"`
	Capture       *bool             `json:"capture"`
	Description   *string           `json:"description"`
	Metadata      map[string]string `json:"metadata"`
}

type floorCard struct {
	Number   string `json:"number"`
	ExpMonth int    `json:"exp_month"`
	ExpYear  int    `json:"exp_year"`
	CVC      string `json:"cvc"`
}

type floorCardView struct {
	Brand       string `json:"brand"`
	Last4       string `json:"last4"`
	ExpMonth    int    `json:"exp_month"`
	ExpYear     int    `json:"exp_year"`
	Fingerprint string `json:"fingerprint"`
}

// floorCharge has the fields of the project's charge object.
type floorCharge struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	Amount            int64             `json:"amount"`
	AmountRefunded    int64             `json:"amount_refunded"`
	Currency          string            `json:"currency"`
	Status            string            `json:"status"`
	PaymentMethod     string            `json:"payment_method"`
	Card              floorCardView     `json:"card"`
	Provider          string            `json:"provider"`
	ProviderReference *string           `json:"provider_reference"`
	Environment       string            `json:"environment"`
	Capture           bool              `json:"capture"`
	Description       *string           `json:"description"`
	Metadata          map[string]string `json:"metadata"`
	FailureCode       *string           `json:"failure_code"`
	FailureMessage    *string           `json:"failure_message"`
	CreatedAt         string            `json:"created_at"`
	UpdatedAt         string            `json:"updated_at"`
}

type floorEvent struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Type      string `json:"type"`
	CreatedAt string `json:"created_at"`
	Data      struct {
		Object string       `json:"object"`
		Charge *floorCharge `json:"charge"`
	} `json:"data"`
}

type floor struct {
	db       *sqlDB
	rdb      *redisDB
	sha      string
	token    []byte // the Authorization header the floor accepts
	merchant string
	limitKey []string
	limitN   int
	aead     cipher.AEAD
	mac      []byte
}

// serveFloor runs the floor server until ctx ends.
func serveFloor(ctx context.Context, args []string, getenv func(string) string) error {
	fs := flag.NewFlagSet("bench floor", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	merchant := fs.String("merchant", "", "merchant id written into the rows")
	if err := fs.Parse(args); err != nil {
		return err
	}
	db, err := openSQL(ctx, getenv("FLOOR_DATABASE_URL"))
	if err != nil {
		return err
	}
	defer db.close()
	rdb, err := openRedis(getenv("FLOOR_REDIS_URL"))
	if err != nil {
		return err
	}
	defer rdb.close()
	sha, err := rdb.load(ctx, floorLimit)
	if err != nil {
		return fmt.Errorf("load the limit script: %w", err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	block, _ := aes.NewCipher(key)
	aead, _ := cipher.NewGCM(block)
	token := getenv("FLOOR_AUTHORIZATION")
	digest := sha256.Sum256([]byte(token))
	f := &floor{db: db, rdb: rdb, sha: sha, token: []byte(token), merchant: *merchant,
		limitKey: []string{"bench:floor:rl:" + hex.EncodeToString(digest[:8]), "bench:floor:revoked:" + hex.EncodeToString(digest[:8])},
		limitN:   100_000_000, aead: aead, mac: key}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: f, ReadHeaderTimeout: 15 * time.Second, IdleTimeout: 75 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

func (f *floor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/healthz":
		w.WriteHeader(http.StatusOK)
	case r.URL.Path == "/v1/charges" && r.Method == http.MethodPost:
		f.create(w, r)
	default:
		http.NotFound(w, r)
	}
}

func floorError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"message":%q}}`, msg)
}

func (f *floor) create(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), f.token) != 1 {
		floorError(w, http.StatusUnauthorized, "unknown key")
		return
	}
	idemKey := r.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		floorError(w, http.StatusBadRequest, "unreadable body")
		return
	}
	var p floorRequest
	if err := json.Unmarshal(body, &p); err != nil {
		floorError(w, http.StatusBadRequest, "invalid JSON")
		return
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := p.valid(now); err != nil {
		floorError(w, http.StatusBadRequest, err.Error())
		return
	}

	res, err := f.rdb.evalSha(ctx, f.sha, f.limitKey, f.limitN, 60_000)
	switch {
	case err != nil || len(res) != 2:
		floorError(w, http.StatusServiceUnavailable, "rate limiter unavailable")
		return
	case res[0] == -1:
		floorError(w, http.StatusUnauthorized, "revoked key")
		return
	case res[0] == 0:
		floorError(w, http.StatusTooManyRequests, "too many requests")
		return
	}

	id, evID := uuid.Must(uuid.NewV7()).String(), uuid.Must(uuid.NewV7()).String()
	number := p.Card.Number
	fp := hex.EncodeToString(f.hmac([]byte(f.merchant), []byte(number))[:16])
	secret, _ := json.Marshal(map[string]any{"n": number, "c": p.Card.CVC, "m": p.Card.ExpMonth, "y": p.Card.ExpYear})
	nonce := make([]byte, f.aead.NonceSize())
	_, _ = rand.Read(nonce)
	sealed := f.aead.Seal(nonce, nonce, secret, []byte(id))
	ts := now.Format("2006-01-02T15:04:05.000Z")
	ch := &floorCharge{ID: id, Object: "charge", Amount: *p.Amount, Currency: strings.ToUpper(p.Currency),
		Status: "created", PaymentMethod: "card", Provider: "sandbox", Environment: "sandbox", Capture: p.Capture == nil || *p.Capture,
		Card:        floorCardView{Brand: "visa", Last4: number[len(number)-4:], ExpMonth: p.Card.ExpMonth, ExpYear: p.Card.ExpYear, Fingerprint: fp},
		Description: p.Description, Metadata: p.Metadata, CreatedAt: ts, UpdatedAt: ts}
	if ch.Metadata == nil {
		ch.Metadata = map[string]string{}
	}
	resp, err := json.Marshal(ch)
	if err != nil {
		floorError(w, http.StatusInternalServerError, "encode")
		return
	}
	ev := floorEvent{ID: evID, Object: "event", Type: "charge.created", CreatedAt: ts}
	ev.Data.Object, ev.Data.Charge = "charge", ch
	evBody, err := json.Marshal(ev)
	if err != nil {
		floorError(w, http.StatusInternalServerError, "encode")
		return
	}
	var created int
	err = f.db.query(ctx, floorInsert, []any{id, f.merchant, ch.Amount, ch.Currency, ch.Capture, ch.Card.Last4,
		ch.Card.ExpMonth, ch.Card.ExpYear, fp, sealed, ch.Description, ch.Metadata, now,
		evID, idemKey, f.hmac([]byte(r.Method), []byte(r.URL.Path), body), resp, evBody}, &created)
	switch {
	case err != nil:
		floorError(w, http.StatusServiceUnavailable, "database: "+err.Error())
		return
	case created != 1: // the harness never repeats a key; the floor does not replay
		floorError(w, http.StatusConflict, "idempotency key reused")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(resp)))
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(resp)
}

func (f *floor) hmac(parts ...[]byte) []byte {
	m := hmac.New(sha256.New, f.mac)
	for _, p := range parts {
		m.Write(p)
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

// valid is the same input check as the project's, minus the error catalogue.
func (p *floorRequest) valid(now time.Time) error {
	c := p.Card
	switch {
	case p.Amount == nil || *p.Amount < 1 || *p.Amount > 99_999_999:
		return errors.New("invalid amount")
	case len(p.Currency) != 3:
		return errors.New("invalid currency")
	case p.PaymentMethod != "card":
		return errors.New("invalid payment_method")
	case len(c.Number) < 12 || len(c.Number) > 19 || !luhn(c.Number):
		return errors.New("invalid card.number")
	case c.ExpMonth < 1 || c.ExpMonth > 12 || c.ExpYear < now.Year() || c.ExpYear == now.Year() && c.ExpMonth < int(now.Month()):
		return errors.New("invalid or expired card")
	case len(c.CVC) < 3 || len(c.CVC) > 4:
		return errors.New("invalid card.cvc")
	case len(p.Metadata) > 50:
		return errors.New("too much metadata")
	}
	return nil
}

func luhn(number string) bool {
	sum, double := 0, false
	for i := len(number) - 1; i >= 0; i-- {
		d := int(number[i] - '0')
		if d < 0 || d > 9 {
			return false
		}
		if double {
			if d *= 2; d > 9 {
				d -= 9
			}
		}
		sum += d
		double = !double
	}
	return sum%10 == 0
}

// floorCommand is how the harness starts the floor: this very binary.
func floorCommand(addr, merchant, dbURL, redisURL, authorization string) (path string, args, env []string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, nil, err
	}
	return exe, []string{"floor", "-addr", addr, "-merchant", merchant},
		[]string{"FLOOR_DATABASE_URL=" + dbURL, "FLOOR_REDIS_URL=" + redisURL, "FLOOR_AUTHORIZATION=" + authorization}, nil
}
