package adyen

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

// Adyen's limits on the Idempotency-Key header and on a reference.
const (
	maxKey       = 64
	maxReference = 80
)

// idempotencyKey is the Idempotency-Key sent for the caller's key: the key
// itself when Adyen takes it, else a digest of it (stable across retries,
// distinct for distinct keys, within Adyen's 64 characters). An empty key
// is a decline invalid_request.
func idempotencyKey(key string) (string, error) {
	if strings.TrimSpace(key) == "" {
		return "", &providers.Decline{Code: "invalid_request", Message: "An idempotency key is required."}
	}
	if len(key) <= maxKey {
		return key, nil
	}
	sum := sha256.Sum256([]byte(key))
	return "gatehouse-" + base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// reference is s as a reference of a request (payment, capture, refund):
// itself when it fits in Adyen's 80 characters, else the digest
// idempotencyKey gives.
func reference(s string) string {
	if len(s) <= maxReference {
		return s
	}
	d, _ := idempotencyKey(s)
	return d
}

// pspPath is the path of a modification of the payment psp, or a decline
// invalid_request when there is no payment to name.
func pspPath(psp, what string) (string, error) {
	if strings.TrimSpace(psp) == "" {
		return "", &providers.Decline{Code: "invalid_request", Message: "A payment reference is required."}
	}
	return "/payments/" + pathEscape(psp) + "/" + what, nil
}

// paymentRequest is the part of Adyen's PaymentRequest this adapter sends.
type paymentRequest struct {
	Amount                   Amount              `json:"amount"`
	Reference                string              `json:"reference"`
	PaymentMethod            cardDetails         `json:"paymentMethod"`
	ReturnURL                string              `json:"returnUrl"`
	MerchantAccount          string              `json:"merchantAccount"`
	ShopperInteraction       string              `json:"shopperInteraction"`
	RecurringProcessingModel string              `json:"recurringProcessingModel,omitempty"`
	CaptureDelayHours        *int                `json:"captureDelayHours,omitempty"`
	AdditionalData           map[string]string   `json:"additionalData,omitempty"`
	AuthenticationData       *authenticationData `json:"authenticationData,omitempty"`
}

// cardDetails is Adyen's CardDetails with raw card data (type scheme).
type cardDetails struct {
	Type        string `json:"type"`
	Number      string `json:"number"`
	ExpiryMonth string `json:"expiryMonth"`
	ExpiryYear  string `json:"expiryYear"`
	CVC         string `json:"cvc,omitempty"`
}

// String never prints card data.
func (cardDetails) String() string { return "[card]" }

// GoString never prints card data.
func (cardDetails) GoString() string { return "[card]" }

type authenticationData struct {
	ThreeDSRequestData *threeDSRequestData `json:"threeDSRequestData,omitempty"`
}

type threeDSRequestData struct {
	NativeThreeDS string `json:"nativeThreeDS,omitempty"`
}

// paymentResponse is the part of Adyen's PaymentResponse (and
// PaymentDetailsResponse) this adapter reads.
type paymentResponse struct {
	PSPReference      string         `json:"pspReference"`
	ResultCode        string         `json:"resultCode"`
	RefusalReason     string         `json:"refusalReason"`
	RefusalReasonCode string         `json:"refusalReasonCode"`
	Action            *action        `json:"action"`
	AdditionalData    map[string]any `json:"additionalData"`
}

// action is the part of Adyen's action objects this adapter reads.
type action struct {
	Type   string `json:"type"`
	URL    string `json:"url"`
	Method string `json:"method"`
}

// Authorize sends POST /payments for r.Amount on the card's details, with
// reference and Idempotency-Key from r.IdempotencyKey (Adyen keeps a key
// at least 7 days). A card token is ErrUnsupported: only card details are
// carried to Adyen yet.
//
// Capture: v71 has no capture method of its own. With r.Capture the
// payment is sent with captureDelayHours 0, which captures it at once
// whatever the merchant account's default delay; Authorised then means
// captured (Adyen confirms the capture itself with a CAPTURE notification
// only when the account is set to send one for automatic captures, and
// the result does not wait for it). Without r.Capture the payment is sent
// with additionalData.manualCapture "true", Adyen's per-payment switch to
// manual capture, so it stays authorized until Capture.
//
// On session the payment is Ecommerce and asks for Adyen's redirect 3-D
// Secure flow (authenticationData.threeDSRequestData.nativeThreeDS
// "disabled"), whose action is a page the cardholder is sent to and which
// sends them back to r.ReturnURL. Off session it is ContAuth with
// recurringProcessingModel UnscheduledCardOnFile (the gateway charging a
// card it keeps); no challenge is possible, and an answer that asks for
// one is declined with authentication_required. r.ReturnURL is required
// either way (Adyen requires returnUrl on every payment).
//
// r.Description and r.Metadata are not sent: PaymentRequest has no
// description, and its metadata is limited to 20 short entries.
//
// The answer is read by paymentResult.
func (a *Adyen) Authorize(ctx context.Context, r providers.AuthorizeRequest) (providers.Result, error) {
	key, err := idempotencyKey(r.IdempotencyKey)
	if err != nil {
		return providers.Result{}, err
	}
	if r.Card.Token != "" {
		// A final refusal (nothing was sent): the API refuses such charges
		// before they reach the worker; a saved card's token would.
		return providers.Result{}, fmt.Errorf("%w: %w", ErrUnsupported,
			&providers.Decline{Code: "invalid_request", Message: "Card tokens are not carried to Adyen yet; charge the card's details instead."})
	}
	if r.Card.Number == "" || r.Card.ExpMonth < 1 || r.Card.ExpMonth > 12 || r.Card.ExpYear < 1000 || r.Card.ExpYear > 9999 {
		return providers.Result{}, &providers.Decline{Code: "invalid_request", Message: "The card's number and expiry date are required."}
	}
	if strings.TrimSpace(r.ReturnURL) == "" {
		return providers.Result{}, &providers.Decline{Code: "invalid_request", Message: "Adyen requires a return URL on every payment."}
	}
	amount, err := toAdyen(r.Amount, r.Currency)
	if err != nil {
		return providers.Result{}, err
	}
	req := paymentRequest{
		Amount:    amount,
		Reference: reference(r.IdempotencyKey),
		PaymentMethod: cardDetails{Type: "scheme", Number: r.Card.Number,
			ExpiryMonth: fmt.Sprintf("%02d", r.Card.ExpMonth), ExpiryYear: fmt.Sprintf("%04d", r.Card.ExpYear), CVC: r.Card.CVC},
		ReturnURL:          r.ReturnURL,
		MerchantAccount:    a.merchant,
		ShopperInteraction: "Ecommerce",
	}
	if r.Capture {
		zero := 0
		req.CaptureDelayHours = &zero
	} else {
		req.AdditionalData = map[string]string{"manualCapture": "true"}
	}
	if r.OffSession {
		req.ShopperInteraction, req.RecurringProcessingModel = "ContAuth", "UnscheduledCardOnFile"
	} else {
		req.AuthenticationData = &authenticationData{ThreeDSRequestData: &threeDSRequestData{NativeThreeDS: "disabled"}}
	}
	var res paymentResponse
	if err := a.post(ctx, "/payments", key, req, &res, r.Card.Number, r.Card.CVC); err != nil {
		return providers.Result{}, err
	}
	return paymentResult(res, stage{offSession: r.OffSession})
}

// detailKeys are the fields of Adyen's PaymentCompletionDetails a card's
// return can carry: redirectResult (the redirect flow), payload, the 3-D
// Secure 1 MD and PaRes, and the 3-D Secure 2 component's results. Other
// values of the return (the gateway's own) are not sent: Adyen refuses
// unknown fields.
var detailKeys = map[string]bool{
	"redirectResult": true, "payload": true, "MD": true, "PaRes": true,
	"threeDSResult": true, "threeds2.challengeResult": true, "threeds2.fingerprint": true,
}

// paymentDetailsRequest is Adyen's PaymentDetailsRequest.
type paymentDetailsRequest struct {
	Details map[string]string `json:"details"`
}

// Authenticate sends the values the cardholder came back with (r.Details,
// Adyen's redirectResult) to POST /payments/details, with r.IdempotencyKey,
// and reads the answer like that of Authorize: Authorised is a result
// (captured when the authorization asked for capture), Refused a decline
// (authentication_failed when the issuer's refusal is 3D Not Authenticated
// or the shopper canceled), Pending or Received a pending result, a new
// RedirectShopper or ChallengeShopper a result with Action (the cardholder
// has not finished).
//
// The result's reference is the pspReference of the answer: Adyen may name
// the payment only now (its first answer to a redirect need not carry one),
// so the caller keeps this one. r.Reference is used when the answer names
// none.
//
// Without any value Adyen can read, the cardholder came back without
// Adyen's answer: a decline authentication_failed, as Adyen cannot finish
// the payment without it.
func (a *Adyen) Authenticate(ctx context.Context, r providers.AuthenticateRequest) (providers.Result, error) {
	key, err := idempotencyKey(r.IdempotencyKey)
	if err != nil {
		return providers.Result{}, err
	}
	details := map[string]string{}
	for k, v := range r.Details {
		if detailKeys[k] && v != "" {
			details[k] = v
		}
	}
	if len(details) == 0 {
		return providers.Result{}, &providers.Decline{Code: "authentication_failed", Message: "The cardholder came back without the issuer's answer."}
	}
	var res paymentResponse
	if err := a.post(ctx, "/payments/details", key, paymentDetailsRequest{Details: details}, &res); err != nil {
		return providers.Result{}, err
	}
	if res.PSPReference == "" {
		res.PSPReference = r.Reference
	}
	return paymentResult(res, stage{afterChallenge: true})
}

// stage is where a payment answer comes from.
type stage struct {
	offSession     bool // Authorize of an off-session payment: no challenge is possible
	afterChallenge bool // Authenticate: the cardholder's challenge is behind
}

// paymentResult reads Adyen's answer to /payments or /payments/details:
//
//   - Authorised: a result with the pspReference (an error wrapping
//     providers.ErrUnavailable if Adyen named none, as the payment could not
//     be captured or followed);
//   - Refused: a decline whose code maps refusalReasonCode (refusalDecline);
//   - Error and Cancelled: final states in which nothing was taken: a
//     decline, processing_error unless the refusal reason says more
//     (authentication_failed after a challenge);
//   - Pending and Received: a pending result; Adyen's notification settles it;
//   - RedirectShopper, IdentifyShopper, ChallengeShopper: a result whose
//     Action names the page of action.url (method GET); off session, or with
//     no page to send the cardholder to (a native 3-D Secure 2 action, a POST
//     form), a decline authentication_required: nothing is taken before the
//     cardholder authenticates;
//   - anything else (PartiallyAuthorised, which this adapter never asks for,
//     PresentToShopper, codes Adyen may add): an error wrapping
//     providers.ErrUnavailable, as what Adyen holds is unknown.
func paymentResult(res paymentResponse, st stage) (providers.Result, error) {
	switch res.ResultCode {
	case "Authorised":
		if res.PSPReference == "" {
			return providers.Result{}, fmt.Errorf("%w: adyen: an authorised payment without a pspReference", providers.ErrUnavailable)
		}
		return providers.Result{Reference: res.PSPReference}, nil
	case "Refused":
		return providers.Result{}, refusalDecline(res, st, "card_declined")
	case "Error", "Cancelled":
		return providers.Result{}, refusalDecline(res, st, "processing_error")
	case "Pending", "Received":
		return providers.Result{Reference: res.PSPReference, Pending: true}, nil
	case "RedirectShopper", "IdentifyShopper", "ChallengeShopper":
		if st.offSession {
			return providers.Result{}, &providers.Decline{Code: "authentication_required",
				Message: "The card requires authentication, which is not possible with the cardholder absent."}
		}
		if act := res.Action; act != nil && act.URL != "" && (act.Method == "" || strings.EqualFold(act.Method, "GET")) {
			return providers.Result{Reference: res.PSPReference, Action: &providers.Action{RedirectURL: act.URL}}, nil
		}
		return providers.Result{}, &providers.Decline{Code: "authentication_required",
			Message: "The card requires authentication and Adyen named no page to send the cardholder to."}
	}
	return providers.Result{}, fmt.Errorf("%w: adyen: payment %s answered with result code %q", providers.ErrUnavailable, res.PSPReference, res.ResultCode)
}

// refusalCodes maps Adyen's refusalReasonCode (its documented refusal
// reasons) to Gatehouse's decline codes. The soft ones (processing_error,
// issuer_unavailable, try_again_later) are failures on the way to the
// issuer, which another connector may not meet. Codes not listed are
// card_declined (or the result code's default).
var refusalCodes = map[string]string{
	"2":  "card_declined",           // Refused
	"3":  "card_declined",           // Referral
	"4":  "processing_error",        // Acquirer Error
	"5":  "card_declined",           // Blocked Card (lost or stolen: see refusalReasonRaw)
	"6":  "expired_card",            // Expired Card
	"7":  "invalid_request",         // Invalid Amount
	"8":  "card_declined",           // Invalid Card Number
	"9":  "issuer_unavailable",      // Issuer Unavailable
	"10": "card_declined",           // Not supported
	"11": "authentication_failed",   // 3D Not Authenticated
	"12": "insufficient_funds",      // Not enough balance
	"14": "fraudulent",              // Acquirer Fraud
	"15": "card_declined",           // Cancelled
	"16": "card_declined",           // Shopper Cancelled
	"17": "card_declined",           // Invalid Pin
	"18": "card_declined",           // Pin tries exceeded
	"19": "card_declined",           // Pin validation not possible
	"20": "fraudulent",              // FRAUD (Adyen's risk checks)
	"21": "processing_error",        // Not Submitted
	"22": "fraudulent",              // FRAUD-CANCELLED
	"23": "card_declined",           // Transaction Not Permitted
	"24": "incorrect_cvc",           // CVC Declined
	"25": "card_declined",           // Restricted Card
	"26": "card_declined",           // Revocation Of Auth
	"27": "card_declined",           // Declined Non Generic
	"28": "card_declined",           // Withdrawal amount exceeded
	"29": "card_declined",           // Withdrawal count exceeded
	"31": "fraudulent",              // Issuer Suspected Fraud
	"32": "card_declined",           // AVS Declined
	"33": "card_declined",           // Card requires online pin
	"34": "card_declined",           // No checking account available on Card
	"35": "card_declined",           // No savings account available on Card
	"36": "card_declined",           // Mobile pin required
	"37": "card_declined",           // Contactless fallback
	"38": "authentication_required", // Authentication required
	"39": "processing_error",        // RReq not received from DS
	"40": "card_declined",           // Current AID is in Penalty Box
	"41": "card_declined",           // CVM Required Restart Payment
	"42": "processing_error",        // 3DS Authentication Error
	"43": "card_declined",           // Online PIN required
	"44": "try_again_later",         // Transaction blocked by Adyen to prevent excessive retry fees
}

// refusalDecline is the decline of a refused (or failed, or canceled)
// payment: the code refusalReasonCode maps to, else fallback. A blocked or
// plainly refused card whose raw acquirer answer says lost or stolen is
// lost_card or stolen_card. Before any challenge, 3D Not Authenticated
// means the card needed an authentication that did not happen
// (authentication_required); after one, a shopper who canceled failed it.
func refusalDecline(res paymentResponse, st stage, fallback string) *providers.Decline {
	code, ok := refusalCodes[res.RefusalReasonCode]
	if !ok {
		code = fallback
	}
	raw, _ := res.AdditionalData["refusalReasonRaw"].(string)
	raw = strings.ToLower(raw)
	switch {
	case code == "card_declined" && strings.Contains(raw, "lost"):
		code = "lost_card"
	case code == "card_declined" && strings.Contains(raw, "stolen"):
		code = "stolen_card"
	case code == "authentication_failed" && !st.afterChallenge:
		code = "authentication_required"
	case st.afterChallenge && (res.RefusalReasonCode == "16" || res.ResultCode == "Cancelled"):
		code = "authentication_failed"
	}
	msg := res.RefusalReason
	if msg == "" {
		msg = "Adyen answered " + res.ResultCode + "."
	}
	return &providers.Decline{Code: code, Message: msg}
}
