package authz

import "testing"

// TestRolesNest: an admin may do at most what an owner may, every other
// role at most what an admin may, the viewer writes nothing, and only an
// owner changes the account's policy.
func TestRolesNest(t *testing.T) {
	resources := append(append([]Resource{}, KeyResources...), Members, AuditLog, Account)
	for _, role := range Roles[1:] {
		above := RolePermissions(Admin)
		if role == Admin {
			above = RolePermissions(Owner)
		}
		for _, r := range resources {
			if RolePermissions(role)[r] > above[r] {
				t.Errorf("%s has %s on %s, more than the role above it", role, RolePermissions(role)[r], r)
			}
		}
	}
	for _, r := range resources {
		if RolePermissions(Viewer)[r] > Read {
			t.Errorf("viewer writes %s", r)
		}
		for _, role := range Roles[1:] {
			if r == Account && RolePermissions(role)[r] == Write {
				t.Errorf("%s changes the account's policy", role)
			}
		}
	}
	if RolePermissions("root") != nil || ValidRole("root") || !ValidRole(Viewer) {
		t.Error("an unknown role is valid")
	}
}

func TestParseKeyPermissions(t *testing.T) {
	p, err := ParseKeyPermissions("permissions", map[string]string{"charges": "write", "refunds": "read", "customers": "none"})
	if err != nil || !p.Allows(Charges, Write) || !p.Allows(Refunds, Read) || p.Allows(Refunds, Write) || p.Allows(Customers, Read) || p.Allows(Events, Read) {
		t.Fatalf("%v %v", p, err)
	}
	if !p.Allows("", Write) {
		t.Error("Anyone's need refused")
	}
	for _, bad := range []map[string]string{{"members": "read"}, {"audit_log": "read"}, {"charges": "admin"}, {"Charges": "read"}} {
		if _, err := ParseKeyPermissions("permissions", bad); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	if got := p.Strings(); len(got) != len(KeyResources) || got["charges"] != "write" || got["events"] != "none" {
		t.Errorf("Strings: %v", got)
	}
}

// TestBeyond: only owners and admins reach everything a secret key does;
// every role's own key resources are within it, and one level more on any
// resource is beyond it.
func TestBeyond(t *testing.T) {
	for _, role := range Roles {
		rp := RolePermissions(role)
		_, beyond := SecretKey.Beyond(rp)
		if want := role == Owner || role == Admin; beyond == want {
			t.Errorf("%s: a secret key beyond the role is %v", role, beyond)
		}
		own := Permissions{}
		for _, r := range KeyResources {
			own[r] = rp[r]
		}
		if r, ok := own.Beyond(rp); ok {
			t.Errorf("%s: its own permissions are beyond it on %s", role, r)
		}
		for _, r := range KeyResources {
			if rp[r] == Write {
				continue
			}
			more := Permissions{r: rp[r] + 1}
			if got, ok := more.Beyond(rp); !ok || got != r {
				t.Errorf("%s: %s %s is not beyond the role (%s, %v)", role, r, more[r], got, ok)
			}
		}
	}
	if _, ok := (Permissions{}).Beyond(nil); ok {
		t.Error("a key with nothing is beyond an unknown role")
	}
	if r, ok := (Permissions{Connectors: Write}).Beyond(RolePermissions(Developer)); !ok || r != Connectors {
		t.Errorf("a developer's key with connectors write: %s %v", r, ok)
	}
}
