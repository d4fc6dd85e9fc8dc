package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/testenv/harness"
)

// mfaJourney is what mfa.mjs saw.
type mfaJourney struct {
	journeyRun
	SecretShown             bool   `json:"secretShown"`
	QRWidth                 int    `json:"qrWidth"`
	RecoveryCodes           int    `json:"recoveryCodes"`
	RecoveryCodesWellFormed bool   `json:"recoveryCodesWellFormed"`
	MFAOn                   string `json:"mfaOn"`
	CodesAfterReload        int    `json:"codesAfterReload"`
	SecondStepShown         bool   `json:"secondStepShown"`
	CookieAfterPassword     bool   `json:"cookieAfterPassword"`
	WrongCodeAlert          string `json:"wrongCodeAlert"`
	LandedOn                string `json:"landedOn"`
}

// TestBrowserTwoFactor is two-factor sign-in (docs/team.md) in Debian's
// chromium against the real binaries (mfa.mjs): sign in, open Security,
// read the key the page shows next to its QR code, confirm with a code
// computed from it, see ten recovery codes once, sign out, sign in again
// with the password and then a code (a wrong one refused first), and land
// on the dashboard. The secret is stored sealed; nothing the script printed
// holds a secret.
func TestBrowserTwoFactor(t *testing.T) {
	parallel(t)
	dir, chromium := browserTools(t)
	shots := screenshotDir(t)
	st := newStack(t, stackOptions{}, "browser two-factor")
	email, password := "mfa-"+harness.RandomHex(4)+"@example.com", "correct horse "+harness.RandomHex(8)
	merchantID := st.createMerchant(t, email, password, "Two-factor Shop")

	cfg := map[string]string{"api": st.replicas[0], "email": email, "password": password, "shots": shots}
	got := journey[mfaJourney](t, dir, chromium, "mfa.mjs", cfg, 2*time.Minute)
	t.Logf("two-factor journey in chromium: %d ms; steps (ms): %v; screenshots in %s", got.TookMS, got.Steps, shots)
	if !got.SecretShown || got.QRWidth < 100 {
		t.Errorf("setup: key shown %v, QR code %d px wide (want an image the page's CSP lets load)", got.SecretShown, got.QRWidth)
	}
	if got.RecoveryCodes != 10 || !got.RecoveryCodesWellFormed || got.MFAOn != "on" || got.CodesAfterReload != 0 {
		t.Errorf("confirmed: %d recovery codes (well formed %v), two-factor %q, codes still shown after a reload: %d",
			got.RecoveryCodes, got.RecoveryCodesWellFormed, got.MFAOn, got.CodesAfterReload)
	}
	if !got.SecondStepShown || got.CookieAfterPassword || !strings.Contains(got.WrongCodeAlert, "Invalid two-factor code") {
		t.Errorf("second sign-in: code step shown %v, a session cookie after the password alone %v, wrong code answered %q",
			got.SecondStepShown, got.CookieAfterPassword, got.WrongCodeAlert)
	}
	if got.LandedOn != "/dashboard/charges" {
		t.Errorf("after the code the browser is on %q, want /dashboard/charges", got.LandedOn)
	}
	if n := queryInt(t, st.db, `SELECT count(*) FROM members WHERE merchant_id = $1 AND mfa_secret_sealed IS NOT NULL AND mfa_pending_sealed IS NULL`, merchantID); n != 1 {
		t.Errorf("%d members with a sealed secret, want 1", n)
	}
	if n := queryInt(t, st.db, `SELECT count(*) FROM mfa_recovery_codes r JOIN members m ON m.id = r.member_id WHERE m.merchant_id = $1 AND r.used_at IS NULL`, merchantID); n != 10 {
		t.Errorf("%d unused recovery codes stored, want 10", n)
	}
	for _, name := range []string{"mfa-security", "mfa-setup-qr", "mfa-recovery-codes", "mfa-login-code", "mfa-signed-in"} {
		if fi, err := os.Stat(filepath.Join(shots, name+".png")); err != nil || fi.Size() < 1000 {
			t.Errorf("screenshot %s: %v", name, err)
		}
	}
}
