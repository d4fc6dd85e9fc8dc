// Package authz says what a caller may do: the resources of the API, the
// access each member role and each restricted key has to them, and the one
// table of what every route and dashboard action needs (see routes.go of the
// HTTP adapter, which enforces it, and docs/team.md, which lists it).
package authz

import (
	"sort"
	"strings"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
)

// Resource is a family of objects a permission covers.
type Resource string

// The resources. Keys (secret and restricted) reach the first ten;
// members, the audit log and the account's settings are for signed-in
// members only.
const (
	Charges          Resource = "charges"           // charges, their capture and void
	Refunds          Resource = "refunds"           // refunds
	Customers        Resource = "customers"         // customers and their saved cards
	Connectors       Resource = "connectors"        // connectors and the routing
	Balance          Resource = "balance"           // the balance, its transactions and payouts
	Disputes         Resource = "disputes"          // disputes: read them; write submits evidence or accepts the loss
	DisputeEvidence  Resource = "dispute_evidence"  // the evidence staged on disputes, before it is submitted
	WebhookEndpoints Resource = "webhook_endpoints" // endpoints, their deliveries and retries
	Events           Resource = "events"            // events and the event stream
	APIKeys          Resource = "api_keys"          // keys of the account
	Members          Resource = "members"           // the team
	AuditLog         Resource = "audit_log"         // the account's audit log
	Account          Resource = "account"           // the account itself and its sign-in policy
)

// KeyResources are the resources a restricted key's permissions name, in
// the order they are shown.
var KeyResources = []Resource{Charges, Refunds, Customers, Connectors, Balance, Disputes, DisputeEvidence, WebhookEndpoints, Events, APIKeys}

// Access is a level of access to a resource; each level includes the ones
// below it.
type Access int

// The levels.
const (
	None Access = iota
	Read
	Write
)

func (a Access) String() string {
	switch a {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "none"
}

// ParseAccess reads "none", "read" or "write".
func ParseAccess(s string) (Access, bool) {
	switch s {
	case "none":
		return None, true
	case "read":
		return Read, true
	case "write":
		return Write, true
	}
	return None, false
}

// Permissions maps resources to access; a missing resource is None.
type Permissions map[Resource]Access

// Allows reports whether p grants at least a on r. Every caller has
// Anyone's need.
func (p Permissions) Allows(r Resource, a Access) bool { return r == "" || p[r] >= a }

// Roles of a member.
const (
	Owner     = "owner"
	Admin     = "admin"
	Developer = "developer"
	Support   = "support"
	Viewer    = "viewer"
)

// Roles lists the roles from most to least powerful.
var Roles = []string{Owner, Admin, Developer, Support, Viewer}

// ValidRole reports whether role is one of Roles.
func ValidRole(role string) bool {
	for _, r := range Roles {
		if r == role {
			return true
		}
	}
	return false
}

// roles is what each role may do. Owners and admins do everything, except
// that only an owner changes the account's sign-in policy (and only an owner
// makes, changes or removes another owner: the members service's rule).
var roles = map[string]Permissions{
	Owner: {Charges: Write, Refunds: Write, Customers: Write, Connectors: Write, Balance: Write, Disputes: Write,
		DisputeEvidence: Write, WebhookEndpoints: Write, Events: Write, APIKeys: Write, Members: Write, AuditLog: Read, Account: Write},
	Admin: {Charges: Write, Refunds: Write, Customers: Write, Connectors: Write, Balance: Write, Disputes: Write,
		DisputeEvidence: Write, WebhookEndpoints: Write, Events: Write, APIKeys: Write, Members: Write, AuditLog: Read, Account: Read},
	// Keys and webhooks, and payments to read.
	Developer: {Charges: Read, Refunds: Read, Customers: Read, Connectors: Read, Balance: Read, Disputes: Read,
		DisputeEvidence: Read, WebhookEndpoints: Write, Events: Read, APIKeys: Write, Account: Read},
	// Payments to read, refunds, and the evidence of disputes to stage (an
	// admin submits it).
	Support: {Charges: Read, Refunds: Write, Customers: Read, Disputes: Read, DisputeEvidence: Write, Events: Read, Account: Read},
	// Everything a payment team reads, nothing else.
	Viewer: {Charges: Read, Refunds: Read, Customers: Read, Connectors: Read, Balance: Read, Disputes: Read,
		DisputeEvidence: Read, WebhookEndpoints: Read, Events: Read, APIKeys: Read, Account: Read},
}

// RolePermissions returns what role may do (nothing for an unknown role).
func RolePermissions(role string) Permissions { return roles[role] }

// SecretKey is what a secret key may do: everything a key can reach.
var SecretKey = func() Permissions {
	p := Permissions{}
	for _, r := range KeyResources {
		p[r] = Write
	}
	return p
}()

// Need is what a route or action requires.
type Need struct {
	Resource Resource
	Access   Access
}

// Anyone is the need of what every authenticated caller may do: read its
// own account, sign out, set up its own two-factor sign-in.
var Anyone = Need{}

// Denied is the answer to a caller without the permission.
func Denied(n Need) error {
	return &apperr.Error{Kind: apperr.KindForbidden, Code: apperr.CodePermissionDenied,
		Message: "This action needs " + n.Access.String() + " access to " + string(n.Resource) + ", which your role or key does not have."}
}

// ParseKeyPermissions reads a restricted key's permissions, resource to
// "none", "read" or "write". Every resource of KeyResources not named is
// none; a name that is not one of them, or a level that is not one of the
// three, is refused as parameter_invalid on param.
func ParseKeyPermissions(param string, in map[string]string) (Permissions, error) {
	p := Permissions{}
	for name, level := range in {
		r := Resource(name)
		if !isKeyResource(r) {
			names := make([]string, len(KeyResources))
			for i, k := range KeyResources {
				names[i] = string(k)
			}
			return nil, apperr.Invalid(param+"."+name, "Unknown resource %q: use one of %s.", name, strings.Join(names, ", "))
		}
		a, ok := ParseAccess(level)
		if !ok {
			return nil, apperr.Invalid(param+"."+name, "Access must be none, read or write.")
		}
		if a > None {
			p[r] = a
		}
	}
	return p, nil
}

// Beyond returns the first resource of KeyResources (in their order) on
// which p grants more than ceiling, and false when p stays within it. A key
// never holds more than the role of the member who makes it: its access is
// checked against the role's with this.
func (p Permissions) Beyond(ceiling Permissions) (Resource, bool) {
	for _, r := range KeyResources {
		if p[r] > ceiling[r] {
			return r, true
		}
	}
	return "", false
}

// Strings is p as resource to level for every key resource, for responses.
func (p Permissions) Strings() map[string]string {
	out := make(map[string]string, len(KeyResources))
	for _, r := range KeyResources {
		out[string(r)] = p[r].String()
	}
	return out
}

// Names returns the resources p grants at least Read on, sorted.
func (p Permissions) Names() []string {
	var out []string
	for r, a := range p {
		if a > None {
			out = append(out, string(r))
		}
	}
	sort.Strings(out)
	return out
}

func isKeyResource(r Resource) bool {
	for _, k := range KeyResources {
		if k == r {
			return true
		}
	}
	return false
}
