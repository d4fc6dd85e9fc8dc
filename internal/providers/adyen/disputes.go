package adyen

import (
	"context"
	"fmt"
	"strings"

	"github.com/gatehouse-pay/gatehouse/internal/providers"
)

var _ providers.DisputeResponder = (*Adyen)(nil)

// The defense the adapter makes with the merchant's evidence: Adyen's
// generic defense reason, with its one required document, the defense
// material, as a PDF (Adyen takes defense documents as PDF, JPG or TIFF).
const (
	DefenseReasonCode       = "SupplyDefenseMaterial"
	DefenseDocumentTypeCode = "DefenseMaterial"
	defenseContentType      = "application/pdf"
)

// disputeRequest is Adyen's AcceptDisputeRequest, DefendDisputeRequest and
// SupplyDefenseDocumentRequest, as far as this adapter sends them.
type disputeRequest struct {
	MerchantAccountCode string            `json:"merchantAccountCode"`
	DisputePSPReference string            `json:"disputePspReference"`
	DefenseReasonCode   string            `json:"defenseReasonCode,omitempty"`
	DefenseDocuments    []defenseDocument `json:"defenseDocuments,omitempty"`
}

// defenseDocument is Adyen's DefenseDocument. Content is encoded in
// base64 by encoding/json.
type defenseDocument struct {
	Content                 []byte `json:"content"`
	ContentType             string `json:"contentType"`
	DefenseDocumentTypeCode string `json:"defenseDocumentTypeCode"`
}

// disputeResponse is the answer of each Disputes API call.
type disputeResponse struct {
	Result *struct {
		Success      bool   `json:"success"`
		ErrorMessage string `json:"errorMessage"`
	} `json:"disputeServiceResult"`
}

// dispute sends body to the Disputes API's operation op and reads its
// disputeServiceResult: success false is Adyen's refusal, a
// *providers.Decline invalid_request with Adyen's errorMessage; an answer
// without a result leaves the outcome unknown (providers.ErrUnavailable).
// HTTP errors are sorted as for the Checkout API (see send).
func (a *Adyen) dispute(ctx context.Context, op string, body disputeRequest) error {
	body.MerchantAccountCode = a.merchant
	var res disputeResponse
	if err := a.send(ctx, a.disputeBase, "/"+op, "", body, &res); err != nil {
		return err
	}
	switch {
	case res.Result == nil:
		return fmt.Errorf("%w: adyen: %s of dispute %s answered no disputeServiceResult", providers.ErrUnavailable, op, body.DisputePSPReference)
	case !res.Result.Success:
		msg := res.Result.ErrorMessage
		if msg == "" {
			msg = "Adyen refused the request."
		}
		return &providers.Decline{Code: "invalid_request", Message: fmt.Sprintf("%s (Adyen %s)", msg, op)}
	}
	return nil
}

func disputeReference(reference string) error {
	if strings.TrimSpace(reference) == "" {
		return &providers.Decline{Code: "invalid_request", Message: "A dispute reference is required."}
	}
	return nil
}

// SubmitDisputeEvidence defends Adyen's dispute reference with the
// merchant's evidence: POST /supplyDefenseDocument with the evidence
// rendered as one PDF document of type DefenseMaterial, then POST
// /defendDispute with the defense reason SupplyDefenseMaterial, both for
// the adapter's merchant account. Adyen's refusal of either (the dispute
// takes no defense, the reason does not apply to it, the defense period
// ended) is a *providers.Decline; an outage wraps providers.ErrUnavailable
// and the whole answer is sent again.
func (a *Adyen) SubmitDisputeEvidence(ctx context.Context, reference string, evidence map[string]string) error {
	if err := disputeReference(reference); err != nil {
		return err
	}
	doc := defenseDocument{Content: EvidencePDF(reference, evidence), ContentType: defenseContentType,
		DefenseDocumentTypeCode: DefenseDocumentTypeCode}
	if err := a.dispute(ctx, "supplyDefenseDocument", disputeRequest{DisputePSPReference: reference,
		DefenseDocuments: []defenseDocument{doc}}); err != nil {
		return err
	}
	return a.dispute(ctx, "defendDispute", disputeRequest{DisputePSPReference: reference, DefenseReasonCode: DefenseReasonCode})
}

// AcceptDispute accepts Adyen's dispute reference (POST /acceptDispute):
// the merchant takes the loss. Errors as for SubmitDisputeEvidence.
func (a *Adyen) AcceptDispute(ctx context.Context, reference string) error {
	if err := disputeReference(reference); err != nil {
		return err
	}
	return a.dispute(ctx, "acceptDispute", disputeRequest{DisputePSPReference: reference})
}
