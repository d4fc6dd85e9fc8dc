// Package resource declares every JSON body Gatehouse's API answers with
// (api/openapi.yaml), and the webhook event that carries a charge or a
// refund: one Go type per object, "the Charge object", so a reader finds
// each object's shape in one place.
//
// The types are plain structs. Field order is the order of the JSON; the
// json tags, pointers (null) and omitempty are the contract. The functions
// that fill them stay with what they show: a domain type renders its own
// form (charges.Charge.View returns a Charge, and its MarshalJSON renders
// it), internal/httpapi presents the account's objects, lists and errors.
//
// The package imports nothing of Gatehouse's, so every package may use it:
// the worker writes event data with these types as well as the API.
package resource
