package e2e

import (
	"slices"
	"testing"
)

// customersJourney is what journeys.mjs saw of the dashboard's customers
// (journey 14).
type customersJourney struct {
	NextAction     string   `json:"nextAction"`
	AfterChallenge string   `json:"afterChallenge"`
	OffSession     string   `json:"offSession"`
	PendingShown   bool     `json:"pendingShown"`
	Voided         bool     `json:"voided"`
	Listed         int      `json:"listed"`
	Cards          int      `json:"cards"`
	Authenticated  []string `json:"authenticated"`
	Charges        int      `json:"charges"`
	CardDeleted    bool     `json:"cardDeleted"`
}

// checkCustomersJourney: the saved 3-D Secure card's first charge was
// completed on the emulated issuer's page and came back to the customer's
// page, its off-session renewal needed no challenge, a charge that required
// action was voided from its page; the customers list found the customer
// by email in another case, its page showed both cards (the first
// authenticated) and the three charges, and a card was deleted there.
func checkCustomersJourney(t *testing.T, got customersJourney) {
	t.Helper()
	if got.NextAction != "redirect_to_url" || got.AfterChallenge != "captured" || got.OffSession != "captured" || !got.PendingShown || !got.Voided {
		t.Errorf("customers, 3-D Secure: next action %q, after the challenge %q, the off-session renewal %q, pending shown %v, voided from requires_action %v",
			got.NextAction, got.AfterChallenge, got.OffSession, got.PendingShown, got.Voided)
	}
	if got.Listed != 1 || got.Cards != 2 || !slices.Equal(got.Authenticated, []string{"true", "false"}) || got.Charges != 3 || !got.CardDeleted {
		t.Errorf("customers: %d listed, %d cards (authenticated %v), %d charges, a card deleted %v; want 1, 2 (true, false), 3, true",
			got.Listed, got.Cards, got.Authenticated, got.Charges, got.CardDeleted)
	}
}
