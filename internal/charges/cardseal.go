package charges

import (
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
)

// Cards kept outside a charge. A saved card (a customer's payment method)
// keeps its card sealed under its own id, as a token and a charge do: these
// check, fingerprint and seal a card for any owner, and move a sealed card
// from one owner to another without it leaving this package in clear.

// SavedCard is a customer's saved card (a payment method) as a charge takes
// it: its summary, and the card sealed under the method's id.
type SavedCard struct {
	PaymentMethodID string
	CustomerID      string
	Environment     string
	Card            Card
	// TokenID is the card token the method was made from, if any.
	TokenID *string
	// AuthenticatedAt is when the cardholder first authenticated a charge
	// of the card, if ever.
	AuthenticatedAt *time.Time
	Sealed          []byte
}

// SealCard checks a raw card as a charge's card is checked (number with the
// Luhn check, expiry not before now, CVC) and returns its summary, with the
// merchant's fingerprint of the number, and the card sealed with
// keyring.PurposeCard under owner (the id of the object that keeps it) as
// associated data. A bad card is a KindInvalid error naming card.number,
// card.exp_month, card.exp_year or card.cvc.
func SealCard(keys *keyring.Keyring, merchantID string, in RawCard, owner string, now time.Time) (Card, []byte, error) {
	card, secret, err := rawCard(in, now)
	if err != nil {
		return Card{}, nil, err
	}
	sealed, err := sealSecret(keys, &card, merchantID, secret, owner)
	if err != nil {
		return Card{}, nil, err
	}
	return card, sealed, nil
}

// ResealCard opens a card sealed under the owner id from and seals it again
// under to: the card of a token kept by a payment method, or of a payment
// method taken by a charge. The clear card never leaves the function.
func ResealCard(keys *keyring.Keyring, sealed []byte, from, to string) ([]byte, error) {
	plain, err := keys.Open(keyring.PurposeCard, sealed, []byte(from))
	if err != nil {
		return nil, apperr.Internal(err)
	}
	defer clear(plain)
	out, err := keys.Seal(keyring.PurposeCard, plain, []byte(to))
	if err != nil {
		return nil, apperr.Internal(err)
	}
	return out, nil
}

// CardFingerprint is the keyed hash of a card number that card summaries
// show: the same for the same number within a merchant, unrelated across
// merchants.
func CardFingerprint(keys *keyring.Keyring, merchantID, number string) string {
	return hex.EncodeToString(keys.MAC(keyring.PurposeFingerprint, []byte(merchantID), []byte(number))[:16])
}

// sealSecret sets the card's fingerprint and returns the sealed card, with
// owner as its associated data.
func sealSecret(keys *keyring.Keyring, card *Card, merchantID string, secret *secretCard, owner string) ([]byte, error) {
	fp := CardFingerprint(keys, merchantID, secret.Number)
	card.Fingerprint = &fp
	plain, err := json.Marshal(secret)
	if err != nil {
		return nil, apperr.Internal(err)
	}
	defer clear(plain)
	sealed, err := keys.Seal(keyring.PurposeCard, plain, []byte(owner))
	if err != nil {
		return nil, apperr.Internal(err)
	}
	return sealed, nil
}
