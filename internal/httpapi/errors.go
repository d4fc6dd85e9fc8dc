package httpapi

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
)

// statusOf is the one table from error kind to HTTP status.
var statusOf = map[apperr.Kind]int{
	apperr.KindInternal:         http.StatusInternalServerError,
	apperr.KindInvalid:          http.StatusBadRequest,
	apperr.KindUnauthenticated:  http.StatusUnauthorized,
	apperr.KindForbidden:        http.StatusForbidden,
	apperr.KindNotFound:         http.StatusNotFound,
	apperr.KindMethodNotAllowed: http.StatusMethodNotAllowed,
	apperr.KindConflict:         http.StatusConflict,
	apperr.KindTooLarge:         http.StatusRequestEntityTooLarge,
	apperr.KindUnsupportedMedia: http.StatusUnsupportedMediaType,
	apperr.KindUnprocessable:    http.StatusUnprocessableEntity,
	apperr.KindRateLimited:      http.StatusTooManyRequests,
	apperr.KindUnavailable:      http.StatusServiceUnavailable,
}

// fromFiber turns the router's and the body reader's errors into ours.
func fromFiber(c *fiber.Ctx, fe *fiber.Error) *apperr.Error {
	switch fe.Code {
	case fiber.StatusNotFound:
		return &apperr.Error{Kind: apperr.KindNotFound, Code: apperr.CodeNotFound,
			Message: "Unrecognized request URL (" + c.Method() + " " + c.Path() + ")."}
	case fiber.StatusMethodNotAllowed:
		return &apperr.Error{Kind: apperr.KindMethodNotAllowed, Code: apperr.CodeMethodNotAllowed,
			Message: "Method " + c.Method() + " is not allowed on " + c.Path() + "."}
	case fiber.StatusRequestEntityTooLarge:
		return &apperr.Error{Kind: apperr.KindTooLarge, Code: apperr.CodePayloadTooLarge,
			Message: "Request body is larger than " + sizeText(bodyLimitOf(c)) + "."}
	case fiber.StatusRequestHeaderFieldsTooLarge, fiber.StatusBadRequest, fiber.StatusRequestTimeout:
		return apperr.Invalid("", "Malformed HTTP request.")
	}
	if fe.Code >= 500 {
		return apperr.Internal(fe)
	}
	return apperr.Invalid("", "Malformed HTTP request.")
}

// renderError writes err as the contract's error body. It is Fiber's error
// handler and is also called by observe, so the status is known when the
// request is logged and counted.
func (s *server) renderError(c *fiber.Ctx, err error) error {
	var ae *apperr.Error
	var fe *fiber.Error
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &fe):
		ae = fromFiber(c, fe)
	default:
		ae = apperr.Internal(err)
	}
	status, ok := statusOf[ae.Kind]
	if !ok {
		status = http.StatusInternalServerError
	}
	id := requestID(c)
	if status == http.StatusServiceUnavailable && len(c.Response().Header.Peek(fiber.HeaderRetryAfter)) == 0 {
		c.Set(fiber.HeaderRetryAfter, "1")
	}
	switch {
	case status == http.StatusServiceUnavailable && s.Draining.Load():
		// Expected while shutting down (readiness), not worth a warning.
	case status == http.StatusServiceUnavailable:
		s.Log.WarnContext(c.UserContext(), "request refused: dependency unavailable",
			"method", c.Method(), "route", c.Route().Path, "err", err)
	case status >= 500:
		s.Log.ErrorContext(c.UserContext(), "request failed",
			"method", c.Method(), "route", c.Route().Path, "status", status, "code", ae.Code, "err", err)
	}
	if isDashboard(c) {
		return s.renderDashboardError(c, status, ae)
	}
	return writeJSON(c, status, presentError(ae, id))
}

// sizeText writes a body limit as people read it: 64 KiB, 1 MiB.
func sizeText(n int) string {
	if n%(1<<20) == 0 {
		return strconv.Itoa(n>>20) + " MiB"
	}
	return strconv.Itoa(n>>10) + " KiB"
}
