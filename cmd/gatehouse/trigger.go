package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
)

func (c *cli) triggerCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "trigger EVENT",
		Short: "Create the sandbox objects that fire EVENT (" + strings.Join(events.Types, ", ") + ")",
		Long: `trigger creates, with your secret key, the sandbox charge (and refund) that fire EVENT,
and waits until the worker has done its part:

  charge.created, charge.captured  a captured charge of 20.00 USD
  charge.failed                    a charge declined by the bank (card 4000000000000002)
  charge.voided                    an authorization, then voided
  charge.refunded                  a captured charge, then refunded in full
  refund.created, refund.succeeded a captured charge, then refunded 10.00 USD
  charge.requires_action           a charge whose card asks for 3-D Secure (4000002760003184),
                                   left waiting for the cardholder: it prints the challenge
                                   page to complete or fail in a browser
  charge.dispute.created,          a captured charge the cardholder disputes (card
  charge.dispute.funds_withdrawn   4000000000000259): the dispute opens, its money withdrawn
  charge.dispute.updated           the same dispute, with evidence staged
  charge.dispute.closed            the same dispute, accepted (lost)
  charge.dispute.funds_reinstated  the same dispute, won with the evidence winning_evidence,
                                   decided after SANDBOX_DISPUTE_DECISION_DELAY

payout.* and webhook_endpoint.* cannot be triggered: a payout pays out a settled balance,
and webhook_endpoint.* tell of your own endpoints' health.`,
		Args:      positional(cobra.ExactArgs(1)),
		ValidArgs: events.Types,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !events.Known(args[0]) {
				return usageError{fmt.Errorf("%q is not an event type; one of %s", args[0], strings.Join(events.Types, ", "))}
			}
			if strings.HasPrefix(args[0], "payout.") {
				return usageError{fmt.Errorf("%s fires when a payout is made or arrives: a payout pays out an available balance, which a new capture reaches only after SANDBOX_SETTLEMENT_DELAY; make one with POST /v1/payouts then", args[0])}
			}
			if strings.HasPrefix(args[0], "webhook_endpoint.") {
				return usageError{fmt.Errorf("%s is about one of your webhook endpoints: it fires when an endpoint's deliveries keep failing (WEBHOOK_FAILING_AFTER), when it is disabled (its receiver answers 410 Gone) and when it delivers again; register an endpoint at a receiver that fails to see them", args[0])}
			}
			if args[0] == events.ChargeCaptureFailed {
				return usageError{fmt.Errorf("%s fires only when a provider that settles captures by notification (Adyen) reports a failed capture; the sandbox cannot fire it", args[0])}
			}
			cl, err := c.client()
			if err != nil {
				return err
			}
			if strings.HasPrefix(args[0], "charge.dispute.") {
				return c.triggerDispute(cmd.Context(), cl, args[0])
			}
			return c.trigger(cmd.Context(), cl, args[0])
		},
	}
}

type chargeObj struct {
	ID             string      `json:"id"`
	Status         string      `json:"status"`
	Amount         int64       `json:"amount"`
	AmountRefunded int64       `json:"amount_refunded"`
	NextAction     *nextAction `json:"next_action"`
}

// nextAction is what the cardholder must do for a charge that requires action.
type nextAction struct {
	Type          string `json:"type"`
	RedirectToURL *struct {
		URL       string `json:"url"`
		ReturnURL string `json:"return_url"`
	} `json:"redirect_to_url"`
}

type refundObj struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Amount int64  `json:"amount"`
}

// Sandbox cards of the triggers: one the bank declines, one whose issuer
// asks for 3-D Secure every time, one the cardholder disputes once it is
// captured.
const (
	triggerDeclined = "4000000000000002"
	trigger3DS      = "4000002760003184"
	triggerDisputed = "4000000000000259"
)

// triggerReturnURL is where the challenge page of charge.requires_action
// sends the browser afterwards.
const triggerReturnURL = "https://example.com/gatehouse/return"

func (c *cli) trigger(ctx context.Context, cl *client, event string) error {
	card, capture := "4242424242424242", true
	switch event {
	case events.ChargeFailed:
		card = triggerDeclined
	case events.ChargeVoided:
		capture = false
	case events.ChargeRequiresAction:
		card = trigger3DS
	}
	var ch chargeObj
	body := map[string]any{"amount": 2000, "currency": "usd", "payment_method": "card", "capture": capture,
		"card":        map[string]any{"number": card, "exp_month": 12, "exp_year": time.Now().Year() + 3, "cvc": "123"},
		"description": "gatehouse trigger " + event, "metadata": map[string]string{"trigger": event}}
	if event == events.ChargeRequiresAction {
		body["return_url"] = triggerReturnURL
	}
	if _, err := cl.do(ctx, http.MethodPost, "/v1/charges", body, idem(), &ch); err != nil {
		return err
	}
	c.say("charge %s created", ch.ID)
	want := map[string]string{events.ChargeCreated: "", events.ChargeFailed: "failed", events.ChargeVoided: "authorized",
		events.ChargeRequiresAction: "requires_action"}
	final, waits := want[event]
	if !waits {
		final = "captured"
	}
	if final != "" {
		if err := c.waitCharge(ctx, cl, &ch, final); err != nil {
			return err
		}
	}
	switch event {
	case events.ChargeRequiresAction:
		return c.sayChallenge(ch)
	case events.ChargeVoided:
		if _, err := cl.do(ctx, http.MethodPost, "/v1/charges/"+ch.ID+"/void", nil, idem(), &ch); err != nil {
			return err
		}
		return c.waitCharge(ctx, cl, &ch, "voided")
	case events.ChargeRefunded, events.RefundCreated, events.RefundSucceeded:
		amount := int64(1000)
		if event == events.ChargeRefunded {
			amount = ch.Amount
		}
		var r refundObj
		if _, err := cl.do(ctx, http.MethodPost, "/v1/refunds", map[string]any{"charge": ch.ID, "amount": amount,
			"reason": "requested_by_customer", "metadata": map[string]string{"trigger": event}}, idem(), &r); err != nil {
			return err
		}
		c.say("refund %s created", r.ID)
		if event == events.RefundCreated {
			return nil
		}
		return c.wait(ctx, "refund "+r.ID, "succeeded", func() (string, error) {
			_, err := cl.do(ctx, http.MethodGet, "/v1/refunds/"+r.ID, nil, nil, &r)
			return r.Status, err
		})
	}
	return nil
}

type disputeObj struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// triggerDispute makes a captured charge of the disputed card, waits for
// its dispute, and carries the dispute as far as event needs.
func (c *cli) triggerDispute(ctx context.Context, cl *client, event string) error {
	ch := chargeObj{}
	body := map[string]any{"amount": 2000, "currency": "usd", "payment_method": "card", "capture": true,
		"card":        map[string]any{"number": triggerDisputed, "exp_month": 12, "exp_year": time.Now().Year() + 3, "cvc": "123"},
		"description": "gatehouse trigger " + event, "metadata": map[string]string{"trigger": event}}
	if _, err := cl.do(ctx, http.MethodPost, "/v1/charges", body, idem(), &ch); err != nil {
		return err
	}
	c.say("charge %s created", ch.ID)
	if err := c.waitCharge(ctx, cl, &ch, "captured"); err != nil {
		return err
	}
	var d disputeObj
	if err := c.wait(ctx, "the dispute of charge "+ch.ID, "needs_response", func() (string, error) {
		var list struct {
			Data []disputeObj `json:"data"`
		}
		if _, err := cl.do(ctx, http.MethodGet, "/v1/disputes?charge="+ch.ID, nil, nil, &list); err != nil {
			return "", err
		}
		if len(list.Data) == 0 {
			return "not opened", nil
		}
		d = list.Data[0]
		return d.Status, nil
	}); err != nil {
		return err
	}
	c.say("dispute %s opened", d.ID)
	switch event {
	case events.DisputeUpdated:
		_, err := cl.do(ctx, http.MethodPost, "/v1/disputes/"+d.ID, map[string]any{
			"evidence": map[string]any{"uncategorized_text": "Staged by gatehouse trigger."}}, idem(), &d)
		if err == nil {
			c.say("dispute %s: evidence staged", d.ID)
		}
		return err
	case events.DisputeClosed:
		_, err := cl.do(ctx, http.MethodPost, "/v1/disputes/"+d.ID+"/close", nil, idem(), &d)
		if err == nil {
			c.say("dispute %s accepted: %s", d.ID, d.Status)
		}
		return err
	case events.DisputeFundsReinstated:
		if _, err := cl.do(ctx, http.MethodPost, "/v1/disputes/"+d.ID, map[string]any{
			"evidence": map[string]any{"uncategorized_text": "winning_evidence"}, "submit": true}, idem(), &d); err != nil {
			return err
		}
		c.say("dispute %s: winning evidence submitted; the sandbox decides after SANDBOX_DISPUTE_DECISION_DELAY", d.ID)
		return c.wait(ctx, "dispute "+d.ID, "won", func() (string, error) {
			_, err := cl.do(ctx, http.MethodGet, "/v1/disputes/"+d.ID, nil, nil, &d)
			if err == nil && d.Status == "lost" {
				err = fmt.Errorf("dispute %s was lost instead of won", d.ID)
			}
			return d.Status, err
		})
	}
	return nil
}

// sayChallenge prints where the cardholder completes or fails the challenge
// of a charge that requires action.
func (c *cli) sayChallenge(ch chargeObj) error {
	na := ch.NextAction
	if na == nil || na.RedirectToURL == nil {
		return fmt.Errorf("charge %s requires action but names no challenge page", ch.ID)
	}
	c.say("challenge: %s", na.RedirectToURL.URL)
	c.say("open it in a browser and choose Complete or Fail; the browser then goes to %s?charge=%s", na.RedirectToURL.ReturnURL, ch.ID)
	c.say("the charge waits for the cardholder until AUTHENTICATION_TIMEOUT, or until voided: POST /v1/charges/%s/void", ch.ID)
	return nil
}

func idem() map[string]string {
	return map[string]string{"Idempotency-Key": "cli-trigger-" + ids.NewUUID()}
}

func (c *cli) say(format string, args ...any) {
	fmt.Fprintf(c.out, format+"\n", args...)
}

func (c *cli) waitCharge(ctx context.Context, cl *client, ch *chargeObj, status string) error {
	return c.wait(ctx, "charge "+ch.ID, status, func() (string, error) {
		_, err := cl.do(ctx, http.MethodGet, "/v1/charges/"+ch.ID, nil, nil, ch)
		return ch.Status, err
	})
}

// wait polls get until it returns status, with a spinner, for at most a
// minute.
func (c *cli) wait(ctx context.Context, what, status string, get func() (string, error)) error {
	sp := newSpinner(c.errOut, "Waiting for "+what+" to be "+status)
	defer sp.stop()
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := get()
		if err != nil {
			return err
		}
		if got == status {
			sp.stop()
			c.say("%s is %s", what, status)
			return nil
		}
		if got == "failed" && status != "failed" {
			return fmt.Errorf("%s failed instead of becoming %s", what, status)
		}
		if time.Now().After(deadline) {
			return errors.New(what + " is still " + got + " after a minute: is the worker running?")
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
