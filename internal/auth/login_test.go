package auth_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/auth"
	"github.com/gatehouse-pay/gatehouse/internal/members"
)

// people is auth.MemberFinder over a fixed list of members, in the order
// MembershipsByEmail answers them.
type people []members.Member

func (p people) MemberByEmail(_ context.Context, merchantID, email string) (members.Member, error) {
	for _, m := range p {
		if m.MerchantID == merchantID && m.Email == email {
			return m, nil
		}
	}
	return members.Member{}, apperr.NotFound("member")
}

func (p people) MembershipsByEmail(_ context.Context, email string, limit int) ([]members.Member, error) {
	var out []members.Member
	for _, m := range p {
		if m.Email == email && len(out) < limit {
			out = append(out, m)
		}
	}
	return out, nil
}

func (p people) MemberByID(_ context.Context, merchantID, id string) (members.Member, error) {
	for _, m := range p {
		if m.MerchantID == merchantID && m.ID == id {
			return m, nil
		}
	}
	return members.Member{}, apperr.NotFound("member")
}

// sessions keeps nothing: these tests look at sign-ins, not at sessions.
type sessions struct{}

func (sessions) CreateSession(context.Context, auth.Session) error { return nil }
func (sessions) SessionByID(context.Context, string) (auth.Session, error) {
	return auth.Session{}, apperr.NotFound("session")
}
func (sessions) RevokeSession(context.Context, string) (auth.Session, error) {
	return auth.Session{}, nil
}
func (sessions) DeleteSessionsExpiredBefore(context.Context, time.Time) (int64, error) {
	return 0, nil
}

type noCache struct{}

func (noCache) SessionState(context.Context, string) (string, bool, error) { return "", false, nil }
func (noCache) FillSessionState(context.Context, string, string, time.Duration) error {
	return nil
}
func (noCache) SetSessionState(context.Context, string, string, time.Duration) error {
	return nil
}

// TestLoginAcrossMerchants: an address may belong to members of several
// merchants, each with its own password. Every sign-in without a merchant
// checks exactly auth.SignInChecks hashes and one naming a merchant
// exactly one, whether the address belongs to no account, one or several,
// and whatever the password opens; the password chooses the member when it
// opens one, and the answer names the merchants it opened, and no other,
// when it opens several.
func TestLoginAcrossMerchants(t *testing.T) {
	ctx := context.Background()
	h := auth.NewHasher(2)
	hash := func(password string) string {
		t.Helper()
		enc, err := h.Hash(ctx, password)
		if err != nil {
			t.Fatal(err)
		}
		return enc
	}
	shared, own := hash("shared password"), hash("own password")
	const (
		one   = "one@example.com"
		two   = "two@example.com"
		many  = "many@example.com"
		mixed = "mixed@example.com"
	)
	// Merchant n's id, of a valid form so that a named merchant is looked
	// up, and the id of its member.
	id := func(n string) string { return "mer_" + n + strings.Repeat("0", 25) }
	mem := func(n string) string { return "mem_" + n + strings.Repeat("0", 25) }
	member := func(n, email, passwordHash string) members.Member {
		return members.Member{ID: mem(n), MerchantID: id(n), Email: email, PasswordHash: passwordHash}
	}
	p := people{
		member("a", one, shared),
		member("b", two, shared), member("c", two, shared),
		member("d", many, shared), member("e", many, shared), member("f", many, own),
		member("g", many, shared), member("h", many, shared),
		member("i", mixed, own), member("j", mixed, shared), member("k", mixed, ""), // k: invited, no password yet
	}
	tokens := auth.NewTokens([]byte(strings.Repeat("s", 32)), "gatehouse", "gatehouse-dashboard", time.Now)
	svc := auth.NewService(p, sessions{}, noCache{}, h, tokens, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)))

	for _, tc := range []struct {
		name, email, password, merchant string
		member                          string   // the member signed in
		choices                         []string // or the merchants to choose from
		checks                          int64
	}{
		{"unknown", "nobody@example.com", "shared password", "", "", nil, auth.SignInChecks},
		{"one membership, wrong password", one, "wrong", "", "", nil, auth.SignInChecks},
		{"one membership", one, "shared password", "", mem("a"), nil, auth.SignInChecks},
		{"two memberships, wrong password", two, "wrong", "", "", nil, auth.SignInChecks},
		{"two memberships, one password", two, "shared password", "", "", []string{id("b"), id("c")}, auth.SignInChecks},
		{"two memberships, named", two, "shared password", id("c"), mem("c"), nil, 1},
		{"named, not a member there", two, "shared password", id("a"), "", nil, 1},
		{"named, wrong password", two, "wrong", id("b"), "", nil, 1},
		{"unknown, named", "nobody@example.com", "shared password", id("b"), "", nil, 1},
		{"five memberships: the first three checked", many, "shared password", "", "", []string{id("d"), id("e")}, auth.SignInChecks},
		{"five memberships, the fourth named", many, "shared password", id("g"), mem("g"), nil, 1},
		{"the password opens one of several", many, "own password", "", mem("f"), nil, auth.SignInChecks},
		{"own password, another account", mixed, "shared password", "", mem("j"), nil, auth.SignInChecks},
		{"an invitation never opens", mixed, "own password", id("k"), "", nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.Checked()
			l, err := svc.Login(ctx, tc.email, tc.password, tc.merchant)
			if got := h.Checked() - before; got != tc.checks {
				t.Errorf("%d hashes checked, want %d", got, tc.checks)
			}
			switch {
			case tc.member == "" && tc.choices == nil:
				if apperr.CodeOf(err) != apperr.CodeInvalidCredentials || l.Token != "" || l.Choices != nil {
					t.Fatalf("got %+v, %v; want invalid_credentials", l, err)
				}
			case tc.choices != nil:
				var got []string
				for _, m := range l.Choices {
					got = append(got, m.MerchantID)
				}
				if err != nil || l.Token != "" || strings.Join(got, " ") != strings.Join(tc.choices, " ") {
					t.Fatalf("got choices %v, token %q, %v; want the choice of %v", got, l.Token, err, tc.choices)
				}
			default:
				if err != nil || l.Token == "" || l.Member.ID != tc.member {
					t.Fatalf("got %+v, %v; want a session of %s", l.Member, err, tc.member)
				}
			}
		})
	}
	if _, err := svc.Login(ctx, one, "shared password", "acct_1"); apperr.CodeOf(err) != apperr.CodeParameterInvalid {
		t.Fatalf("a malformed merchant: %v, want parameter_invalid", err)
	}
}
