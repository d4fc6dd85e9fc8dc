// Package apperr is Gatehouse's one error model: a small set of kinds that every
// layer speaks, with the public code, message and offending parameter carried
// beside the internal cause. The HTTP layer owns the single table from kind to
// status; nothing else in the tree knows about status codes.
package apperr

import (
	"errors"
	"fmt"
)

// Kind classifies an error by what the caller can do about it.
type Kind int

// The kinds. Each maps to exactly one HTTP status in internal/httpapi.
const (
	KindInternal         Kind = iota // a bug or an unexpected failure; never shown
	KindInvalid                      // the request is malformed or a field is bad
	KindUnauthenticated              // no usable credentials
	KindForbidden                    // credentials are fine but the action is not allowed
	KindNotFound                     // no such object for this merchant
	KindMethodNotAllowed             // the path exists with other methods
	KindConflict                     // the object is in a state that forbids the action
	KindTooLarge                     // the request body is over the limit
	KindUnsupportedMedia             // the body is not JSON
	KindUnprocessable                // well-formed but semantically refused
	KindRateLimited                  // a rate limit was exceeded
	KindUnavailable                  // a dependency is down
)

// Public error codes of the contract.
const (
	CodeInvalidJSON          = "invalid_json"
	CodeParameterMissing     = "parameter_missing"
	CodeParameterInvalid     = "parameter_invalid"
	CodeAmountTooLarge       = "amount_too_large"
	CodeMissingAuthorization = "missing_authorization"
	CodeInvalidToken         = "invalid_token"
	CodeTokenRevoked         = "token_revoked"
	CodeInvalidTokenType     = "invalid_token_type"
	CodeInvalidCredentials   = "invalid_credentials"
	CodeLiveModeDisabled     = "live_mode_disabled"
	CodeNotFound             = "not_found"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeIdempotencyInUse     = "idempotency_key_in_use"
	CodeInvalidState         = "invalid_state"
	// CodeInsufficientBalance refuses a payout above the available balance.
	CodeInsufficientBalance = "insufficient_balance"
	// CodeChargeDisputed: a refund beyond what an open dispute leaves
	// refundable.
	CodeChargeDisputed = "charge_disputed"
	// CodeMFARequired answers the right password of a member with
	// two-factor sign-in on: no session yet; the error carries the
	// challenge that the second step completes.
	CodeMFARequired = "mfa_required"
	// CodePermissionDenied refuses a member whose role, or a restricted
	// key whose permissions, do not cover the action.
	CodePermissionDenied  = "permission_denied"
	CodePayloadTooLarge   = "payload_too_large"
	CodeUnsupportedMedia  = "unsupported_media_type"
	CodeIdempotencyReused = "idempotency_key_reused"
	CodeRateLimited       = "rate_limited"
	CodeInternal          = "internal_error"
	CodeUnavailable       = "service_unavailable"
	// CodeCSRF refuses a dashboard form that did not come from the
	// dashboard's own page (a missing or wrong CSRF token, or a cross-site
	// request); the dashboard answers in HTML, so it is not in the API's table.
	CodeCSRF = "csrf_token_invalid"
)

// LiveModeMessage is the exact message api/openapi.yaml requires.
const LiveModeMessage = "Live mode is not activated"

// Error is an error with a kind, a public code and message, an optional
// parameter name, and an optional internal cause that is logged but never shown.
// Merchants is set only on a sign-in that must name its merchant: the
// accounts the caller proved the password of, to choose from. Challenge is
// set only with CodeMFARequired: the token of the sign-in's second step,
// shown to the caller but never part of Error's text, so never logged.
type Error struct {
	Kind      Kind
	Code      string
	Message   string
	Param     string
	Err       error
	Merchants []Merchant
	Challenge string
}

// Merchant names an account a sign-in may choose.
type Merchant struct {
	ID   string
	Name string
}

func (e *Error) Error() string {
	msg := e.Code + ": " + e.Message
	if e.Param != "" {
		msg += " (param " + e.Param + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the internal cause.
func (e *Error) Unwrap() error { return e.Err }

// New returns an Error of the given kind and code.
func New(kind Kind, code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Message: fmt.Sprintf(format, args...)}
}

// As returns the *Error in err's chain, if any.
func As(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// KindOf returns the kind of err; errors without one are internal.
func KindOf(err error) Kind {
	if e, ok := As(err); ok {
		return e.Kind
	}
	return KindInternal
}

// CodeOf returns the public code of err; errors without one are internal_error.
func CodeOf(err error) string {
	if e, ok := As(err); ok {
		return e.Code
	}
	return CodeInternal
}

// Missing reports that a required parameter is absent.
func Missing(param string) *Error {
	return &Error{Kind: KindInvalid, Code: CodeParameterMissing, Param: param,
		Message: "Missing required parameter: " + param + "."}
}

// Invalid reports that a parameter has a bad value.
func Invalid(param, format string, args ...any) *Error {
	return &Error{Kind: KindInvalid, Code: CodeParameterInvalid, Param: param,
		Message: fmt.Sprintf(format, args...)}
}

// NotFound reports that the object does not exist for this merchant.
func NotFound(what string) *Error {
	return &Error{Kind: KindNotFound, Code: CodeNotFound, Message: "No such " + what + "."}
}

// LiveMode is the refusal of anything in live mode.
func LiveMode() *Error {
	return &Error{Kind: KindForbidden, Code: CodeLiveModeDisabled, Message: LiveModeMessage}
}

// Unauthenticated reports a credentials problem with the given code.
func Unauthenticated(code, message string) *Error {
	return &Error{Kind: KindUnauthenticated, Code: code, Message: message}
}

// Unavailable reports that a dependency is down; cause is kept for the log.
func Unavailable(cause error) *Error {
	return &Error{Kind: KindUnavailable, Code: CodeUnavailable,
		Message: "The service is temporarily unavailable. Please retry.", Err: cause}
}

// Internal wraps an unexpected failure; the cause is logged, never shown.
func Internal(cause error) *Error {
	return &Error{Kind: KindInternal, Code: CodeInternal, Message: "An internal error occurred.", Err: cause}
}
