package charges

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
)

// Cards kept outside a charge. A card token keeps its card sealed under its
// own id, as a charge does, until it is used. A saved card (a customer's
// payment method) is kept longer, so it is kept differently: without its CVC
// (the CVC serves only an authorization, PCI DSS 3.3.1.2, and saving a card
// authorizes nothing), sealed under a random data key of its own, with the
// method and merchant ids as associated data; the data key is stored apart,
// wrapped by keyring.PurposeCardDataKey, and deleted with the method, after
// which a copy of the sealed card (a dead row version, WAL, a backup) opens
// only with a copy of the wrapped key that outlived it (docs/customers.md
// says where one may). These check, fingerprint and seal a card for any owner, and
// move a sealed card from one owner to another without it leaving this
// package in clear.

// SavedCard is a customer's saved card (a payment method) as a charge takes
// it: its summary, and its sealed card.
type SavedCard struct {
	PaymentMethodID string
	MerchantID      string
	CustomerID      string
	Environment     string
	Card            Card
	// TokenID is the card token the method was made from, if any.
	TokenID *string
	// AuthenticatedAt is when the cardholder first authenticated a charge
	// of the card, if ever.
	AuthenticatedAt *time.Time
	// Sealed is the method's card as a release before data keys sealed it
	// (number, CVC and expiry under keyring.PurposeCard and the method's
	// id), or, for a method sealed under its data key, LegacyStub's seal of
	// nothing.
	Sealed []byte
	// Own is the card under its data key and Key the data key, wrapped;
	// both nil for a card not yet converted (see ConvertSavedCard).
	Own []byte
	Key []byte
}

// Legacy reports whether the card is still sealed as a release before data
// keys sealed it (with its CVC, under the card key): ConvertSavedCard
// converts it.
func (c SavedCard) Legacy() bool { return c.Own == nil || c.Key == nil }

// SealedCard is a saved card as the payment method stores it.
type SealedCard struct {
	// Own is the card (number and expiry, never the CVC) sealed under the
	// method's data key, the method's and merchant's ids as associated data.
	Own []byte
	// Key is the data key, wrapped by keyring.PurposeCardDataKey under the
	// same ids. It is stored in a row of its own and deleted with the
	// method.
	Key []byte
	// Stub is what the method's older column (card_sealed, which the
	// previous release reads) holds: LegacyStub.
	Stub []byte
}

// SaveCard checks a raw card as a charge's card is checked (number with the
// Luhn check, expiry not before now, CVC, which is then dropped) and returns
// its summary, with the merchant's fingerprint of the number, and the card
// sealed for the merchant's payment method pmID. A bad card is a KindInvalid
// error naming card.number, card.exp_month, card.exp_year or card.cvc.
func SaveCard(keys *keyring.Keyring, merchantID string, in RawCard, pmID string, now time.Time) (Card, SealedCard, error) {
	card, secret, err := rawCard(in, now)
	if err != nil {
		return Card{}, SealedCard{}, err
	}
	fp := CardFingerprint(keys, merchantID, secret.Number)
	card.Fingerprint = &fp
	sealed, err := sealSaved(keys, merchantID, pmID, secret)
	return card, sealed, err
}

// SaveTokenCard opens the card of a token (sealed under tokenID) and seals
// it, without its CVC, for the merchant's payment method pmID.
func SaveTokenCard(keys *keyring.Keyring, merchantID string, sealed []byte, tokenID, pmID string) (SealedCard, error) {
	secret, err := openSecret(keys.Open(keyring.PurposeCard, sealed, []byte(tokenID)))
	if err != nil {
		return SealedCard{}, err
	}
	return sealSaved(keys, merchantID, pmID, secret)
}

// ConvertSavedCard seals a card saved by an earlier release (see
// SavedCard.Legacy) as SaveCard does, its CVC dropped.
func ConvertSavedCard(keys *keyring.Keyring, c SavedCard) (SealedCard, error) {
	secret, err := openSecret(keys.Open(keyring.PurposeCard, c.Sealed, []byte(c.PaymentMethodID)))
	if err != nil {
		return SealedCard{}, err
	}
	return sealSaved(keys, c.MerchantID, c.PaymentMethodID, secret)
}

// chargeCopy opens a saved card and seals it again, without its CVC, under
// keyring.PurposeCard and the charge's id, as a charge keeps its card until
// the provider answers.
func chargeCopy(keys *keyring.Keyring, c SavedCard, chargeID string) ([]byte, error) {
	var secret *secretCard
	var err error
	if c.Legacy() {
		secret, err = openSecret(keys.Open(keyring.PurposeCard, c.Sealed, []byte(c.PaymentMethodID)))
	} else {
		secret, err = openSecret(openOwn(keys, c.MerchantID, c.PaymentMethodID, c.Own, c.Key))
	}
	if err != nil {
		return nil, err
	}
	secret.CVC = ""
	return sealPlain(keys, secret, chargeID)
}

// ResealCard opens a card sealed under the owner id from and seals it again
// under to: the card of a token taken by a charge. The clear card never
// leaves the function.
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

// OpenSavedCard returns the number, expiry and CVC (always "" for a card
// sealed under its data key) of a saved card, for tests and checks that
// must prove what is stored; charges never need it.
func OpenSavedCard(keys *keyring.Keyring, c SavedCard) (number string, month, year int, cvc string, err error) {
	var secret *secretCard
	if c.Legacy() {
		secret, err = openSecret(keys.Open(keyring.PurposeCard, c.Sealed, []byte(c.PaymentMethodID)))
	} else {
		secret, err = openSecret(openOwn(keys, c.MerchantID, c.PaymentMethodID, c.Own, c.Key))
	}
	if err != nil {
		return "", 0, 0, "", err
	}
	return secret.Number, secret.ExpMonth, secret.ExpYear, secret.CVC, nil
}

// SavedCardAAD is the associated data of a saved card and of its data key:
// the method's and the merchant's ids.
func SavedCardAAD(merchantID, pmID string) []byte {
	return keyring.AssociatedData("payment_method", pmID, merchantID)
}

// LegacyStub is what a payment method sealed under its data key keeps in the
// column that releases before data keys read its card from: nothing,
// sealed under the card key and the method's id. Such a release opens it
// and finds no card, so its charge of the method fails (processing_error)
// instead of erroring; it holds no card data.
func LegacyStub(keys *keyring.Keyring, pmID string) ([]byte, error) {
	return keys.Seal(keyring.PurposeCard, nil, []byte(pmID))
}

func sealSaved(keys *keyring.Keyring, merchantID, pmID string, secret *secretCard) (SealedCard, error) {
	secret.CVC = ""
	plain, err := json.Marshal(secret)
	if err != nil {
		return SealedCard{}, apperr.Internal(err)
	}
	defer clear(plain)
	aad := SavedCardAAD(merchantID, pmID)
	dk, wrapped, err := keys.NewDataKey(keyring.PurposeCardDataKey, aad)
	if err != nil {
		return SealedCard{}, apperr.Internal(err)
	}
	own, err := dk.Seal(plain, aad)
	if err != nil {
		return SealedCard{}, apperr.Internal(err)
	}
	stub, err := LegacyStub(keys, pmID)
	if err != nil {
		return SealedCard{}, apperr.Internal(err)
	}
	return SealedCard{Own: own, Key: wrapped, Stub: stub}, nil
}

func openOwn(keys *keyring.Keyring, merchantID, pmID string, own, wrapped []byte) ([]byte, error) {
	aad := SavedCardAAD(merchantID, pmID)
	dk, err := keys.OpenDataKey(keyring.PurposeCardDataKey, wrapped, aad)
	if err != nil {
		return nil, err
	}
	return dk.Open(own, aad)
}

// openSecret decodes an opened card.
func openSecret(plain []byte, err error) (*secretCard, error) {
	if err != nil {
		return nil, apperr.Internal(err)
	}
	defer clear(plain)
	var secret secretCard
	if err := json.Unmarshal(plain, &secret); err != nil {
		return nil, apperr.Internal(errors.New("charges: the sealed card is not a card"))
	}
	return &secret, nil
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
	return sealPlain(keys, secret, owner)
}

// sealPlain seals secret with keyring.PurposeCard under owner.
func sealPlain(keys *keyring.Keyring, secret *secretCard, owner string) ([]byte, error) {
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
