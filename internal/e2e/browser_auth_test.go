package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// authJourneys is what journeys.mjs saw of cardholder authentication.
type authJourneys struct {
	ChallengeComplete fieldChallenge `json:"challengeComplete"`
	ChallengeFail     fieldChallenge `json:"challengeFail"`
	Redirect          struct {
		pageResult
		ChallengeURL string `json:"challengeURL"`
		ReturnURL    string `json:"returnURL"`
	} `json:"redirect"`
	SavedRequired savedCardJourney `json:"savedRequired"`
	SavedAlways   savedCardJourney `json:"savedAlways"`
	CardSentBy3DS []struct {
		Frame, URL string
	} `json:"cardSentBy3ds"`
}

// pageResult is what a checkout page showed of its charge.
type pageResult struct {
	Text   string `json:"text"`
	Charge string `json:"charge"`
	Status string `json:"status"`
}

// fieldChallenge is a challenge shown in the card field: the field's height
// while it showed and after, and whether the card inputs came back.
type fieldChallenge struct {
	pageResult
	HeightDuring int  `json:"heightDuring"`
	HeightAfter  int  `json:"heightAfter"`
	FormHidden   bool `json:"formHidden"`
	FieldBack    bool `json:"fieldBack"`
}

// savedCardJourney is a card saved in a checkout and charged on session
// (with the challenge), then again off session by the merchant's server.
type savedCardJourney struct {
	fieldChallenge
	Again pageResult `json:"again"`
}

// authenticatedCharge is a charge with how its authentication ended.
type authenticatedCharge struct {
	Status         string  `json:"status"`
	FailureCode    *string `json:"failure_code"`
	Customer       *string `json:"customer"`
	OffSession     bool    `json:"off_session"`
	Authentication struct {
		Status      string  `json:"status"`
		CompletedAt *string `json:"completed_at"`
	} `json:"authentication"`
}

// checkAuthJourneys checks the authentication journeys (10-12 of
// journeys.mjs) against the charges the API holds.
func checkAuthJourneys(t *testing.T, p *payments, got journeys, checkout string) {
	t.Helper()
	s := got.Steps
	t.Logf("authentication journeys (ms): challenge in the card field completed %d, failed %d, on the issuer's page with a return_url %d; two saved cards, each charged on session then off session %d",
		s["challenge_complete"], s["challenge_fail"], s["redirect"], s["saved_card"])
	for name, c := range map[string]fieldChallenge{"completed": got.ChallengeComplete, "failed": got.ChallengeFail,
		"of a card being saved (4000002500003155)": got.SavedRequired.fieldChallenge, "of a card being saved (4000002760003184)": got.SavedAlways.fieldChallenge} {
		if c.HeightDuring < 400 || !c.FormHidden || c.HeightAfter != 170 || !c.FieldBack {
			t.Errorf("challenge %s in the card field: the field was %d px tall (want 400 or more) with its inputs hidden %v; after, %d px (want 170) with its inputs back %v",
				name, c.HeightDuring, c.FormHidden, c.HeightAfter, c.FieldBack)
		}
	}
	want := map[string]struct {
		shown          pageResult
		status, code   string
		authentication string
		offSession     bool
	}{
		"challenge completed":       {got.ChallengeComplete.pageResult, "captured", "", "succeeded", false},
		"challenge failed":          {got.ChallengeFail.pageResult, "failed", "authentication_failed", "failed", false},
		"issuer's page, return_url": {got.Redirect.pageResult, "captured", "", "succeeded", false},
		// 4000002500003155: authenticated once on session, then off session
		// without the cardholder.
		"saved 3155, on session":  {got.SavedRequired.pageResult, "captured", "", "succeeded", false},
		"saved 3155, off session": {got.SavedRequired.Again, "captured", "", "not_required", true},
		// 4000002760003184: the issuer asks every time; off session, no one can answer.
		"saved 3184, on session":  {got.SavedAlways.pageResult, "captured", "", "succeeded", false},
		"saved 3184, off session": {got.SavedAlways.Again, "failed", "authentication_required", "not_required", true},
	}
	ids := map[string]string{}
	for name, w := range want {
		if w.shown.Charge == "" || w.shown.Status != w.status {
			t.Errorf("%s: the page shows %q (charge %q, status %q), want %s", name, w.shown.Text, w.shown.Charge, w.shown.Status, w.status)
			continue
		}
		ids[name] = w.shown.Charge
	}
	if len(ids) == 0 {
		return
	}
	list := make([]string, 0, len(ids))
	for _, id := range ids {
		list = append(list, id)
	}
	_, raw := p.waitCharges(t, list, func(_, status string) bool { return status != "created" && status != "requires_action" }, 20*time.Second)
	for name, id := range ids {
		var c authenticatedCharge
		if err := json.Unmarshal(raw[id], &c); err != nil {
			t.Fatalf("%s: charge %s: %v", name, id, err)
		}
		w := want[name]
		code := ""
		if c.FailureCode != nil {
			code = *c.FailureCode
		}
		saved := strings.HasPrefix(name, "saved")
		if c.Status != w.status || code != w.code || c.Authentication.Status != w.authentication ||
			(c.Authentication.CompletedAt == nil) != (w.authentication == "not_required") ||
			c.OffSession != w.offSession || (c.Customer != nil) != saved {
			t.Errorf("%s: charge %s through the API: %s", name, id, raw[id])
		}
	}
	r := got.Redirect
	if !strings.HasPrefix(r.ChallengeURL, p.st.replicas[0]+"/authenticate/v1/"+r.Charge+"/") || r.ReturnURL != checkout+"return?charge="+r.Charge {
		t.Errorf("return_url: the browser went to %s and came back to %s", r.ChallengeURL, r.ReturnURL)
	}
	if len(got.CardSentBy3DS) != 5 {
		t.Errorf("the cards of the authentication journeys were sent %d times, want once per checkout (5): %+v", len(got.CardSentBy3DS), got.CardSentBy3DS)
	}
	for _, c := range got.CardSentBy3DS {
		if c.Frame != "card field" || c.URL != p.st.replicas[0]+"/v1/tokens" {
			t.Errorf("a card was sent by %+v; want only the card field, to %s/v1/tokens", c, p.st.replicas[0])
		}
	}
}
