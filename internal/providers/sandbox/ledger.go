package sandbox

import (
	"context"
	"time"
)

// Operation is what a provider call asks for.
type Operation string

// The operations the ledger records.
const (
	OpAuthorize Operation = "authorize"
	// OpAuthenticate settles an authorization that waited for the
	// cardholder; it books the authorization's reference when it succeeds.
	OpAuthenticate Operation = "authenticate"
	OpCapture      Operation = "capture"
	OpVoid         Operation = "void"
	OpRefund       Operation = "refund"
)

// Entry is one provider call as the ledger sees it: never card data.
type Entry struct {
	IdempotencyKey string
	Operation      Operation
	// Parent is the sbx_ch_ reference a capture, void or refund acts on; "" for authorize.
	Parent string
	// Amount is the amount asked for; 0 for void, and for a capture of the full amount.
	Amount int64
	// Currency is upper-case ISO 4217 for authorize and refund; "" when the request has none.
	Currency string
	// Account is the connector the call came through (the merchant's
	// account at the sandbox); "" for a charge made before connectors.
	Account string
	// Capture: an authorization (or its authentication) that captures at
	// once.
	Capture bool
	// Dispute, for an authorization of a test card the cardholder disputes
	// once it is captured: the dispute's kind (DisputeFraudulent,
	// DisputeProductNotReceived, DisputeInquiry); "" for the others.
	Dispute string
}

// Record is the ledger's row for one idempotency key.
type Record struct {
	// Entry is what the first call with the key asked for. Later calls never change it.
	Entry
	// Reference is what the first successful call with the key booked; "" until then.
	Reference string
	// Calls counts every call made with the key, this one included: declined,
	// unavailable and replayed calls too.
	Calls int64
}

// Ledger keeps the sandbox's books, so that the sandbox behaves like a real
// provider across processes and restarts: a call repeated with the same
// idempotency key never moves money twice, and tests can count the calls and
// the provider-side charges behind every key. internal/store implements it on
// the table sandbox_ledger:
//
//	idempotency_key  text PRIMARY KEY
//	operation        text NOT NULL  -- authorize | authenticate | capture | void | refund
//	parent_reference text NOT NULL DEFAULT ''
//	amount           bigint NOT NULL
//	currency         text NOT NULL DEFAULT ''
//	reference        text           -- NULL until a call with the key succeeded
//	calls            bigint NOT NULL DEFAULT 1
//	created_at, updated_at timestamptz NOT NULL DEFAULT now()
//	account          text           -- the connector of the first call
//	capture          boolean NOT NULL DEFAULT false
//	booked_at        timestamptz    -- when the reference was booked
//	UNIQUE (reference) WHERE operation IN ('authorize', 'refund')
//
// A capture or void books the reference of the authorization it acted on,
// so references are unique only among authorizations and refunds.
// Provider-side charges are the authorize rows whose reference is not NULL.
// Every method is one statement, safe under concurrent calls with the same key.
type Ledger interface {
	// Call records one call: it inserts the row for e.IdempotencyKey with
	// calls = 1, or, when the row exists, adds 1 to calls and leaves every
	// other column as the first call wrote it. It returns the row as it is
	// after the statement:
	//
	//	INSERT INTO sandbox_ledger (idempotency_key, operation, parent_reference, amount, currency)
	//	VALUES ($1, $2, $3, $4, $5)
	//	ON CONFLICT (idempotency_key) DO UPDATE
	//	    SET calls = sandbox_ledger.calls + 1, updated_at = now()
	//	RETURNING operation, parent_reference, amount, currency, coalesce(reference, ''), calls
	Call(ctx context.Context, e Entry) (Record, error)

	// CallBooked is Call for a call that succeeds at once, with Book of
	// reference in the same statement: one round trip and one commit. The
	// reference is booked only when the row has none and the call asks for
	// what the first call with the key asked (operation, parent, amount and
	// currency); otherwise the row is left as Call leaves it, and the
	// returned Reference is the one stored, if any.
	CallBooked(ctx context.Context, e Entry, reference string) (Record, error)

	// Book stores reference as the outcome of the key's call unless one is
	// stored already, and returns the stored one: the first booking wins, so
	// concurrent successful calls with one key all answer with one reference.
	// The row exists (Call made it); a missing row is an error.
	//
	//	UPDATE sandbox_ledger SET reference = coalesce(reference, $2), updated_at = now()
	//	WHERE idempotency_key = $1 RETURNING reference
	Book(ctx context.Context, idempotencyKey, reference string) (string, error)

	// Authorization returns the row of the authorization that booked
	// reference, or an error of kind apperr.KindNotFound when the sandbox
	// never issued it.
	//
	//	SELECT ... FROM sandbox_ledger WHERE reference = $1 AND operation = 'authorize'
	Authorization(ctx context.Context, reference string) (Record, error)

	// Lookup returns the row of idempotencyKey, or an error of kind
	// apperr.KindNotFound when no call was ever made with it.
	//
	//	SELECT ... FROM sandbox_ledger WHERE idempotency_key = $1
	Lookup(ctx context.Context, idempotencyKey string) (Record, error)

	// Booked returns the booked authentications, captures and voids of the
	// authorization reference, oldest first.
	//
	//	SELECT ... FROM sandbox_ledger WHERE parent_reference = $1
	//	AND operation IN ('authenticate', 'capture', 'void') AND reference IS NOT NULL ORDER BY created_at
	Booked(ctx context.Context, reference string) ([]Record, error)

	// Bookings returns the account's calls that moved money and were
	// booked in [from, to): authorizations and authentications that
	// captured, captures and refunds, each with the authorization it acts
	// on, oldest first.
	Bookings(ctx context.Context, account string, from, to time.Time) ([]Booking, error)

	// Payouts returns the account's payouts made, or failed, in [from, to):
	// the sandbox's bank run pays out what the gateway asks it to.
	Payouts(ctx context.Context, account string, from, to time.Time) ([]Payout, error)
}

// Booking is a booked call that moved money, with when it was booked and
// the authorization it acts on (for an authorization, itself).
type Booking struct {
	Record
	Capture       bool
	BookedAt      time.Time
	Authorization Record
}

// Payout is a payout of an account: its amount left the account when it
// was made and came back if it failed.
type Payout struct {
	ID        string
	Currency  string
	Amount    int64
	CreatedAt time.Time
	// FailedAt is when it failed; nil while it has not.
	FailedAt *time.Time
}
