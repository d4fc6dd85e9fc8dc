package webhooks

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/gatehouse-pay/gatehouse/internal/apperr"
	"github.com/gatehouse-pay/gatehouse/internal/events"
	"github.com/gatehouse-pay/gatehouse/internal/ids"
	"github.com/gatehouse-pay/gatehouse/internal/keyring"
	"github.com/gatehouse-pay/gatehouse/internal/resource"
)

// ClientCertValidity is how long a webhook client certificate is valid.
const ClientCertValidity = 365 * 24 * time.Hour

// ClientCertOverlap is how long the previous client certificate is shown
// after a rotation, so a receiver can trust both while it switches.
// Deliveries present the new one at once.
const ClientCertOverlap = 24 * time.Hour

// ClientCert is a merchant's client certificate for one environment: what
// its deliveries present to receivers that ask for one (mTLS). The private
// key is kept sealed; the certificate is public.
type ClientCert struct {
	ID             string
	MerchantID     string
	Environment    string
	CertificatePEM string
	KeySealed      []byte
	// Fingerprint is the lowercase hex SHA-256 of the certificate's DER.
	Fingerprint string
	NotBefore   time.Time
	NotAfter    time.Time
	CreatedAt   time.Time
	// RetiredAt is when a rotation replaced it; nil for the current one.
	RetiredAt *time.Time
}

// ClientCertStore keeps the client certificates. ClientCertificate answers
// NotFound while the merchant has none in the environment.
type ClientCertStore interface {
	// ClientCertificate returns the current certificate and the one a
	// rotation retired after since (nil if none).
	ClientCertificate(ctx context.Context, merchantID, environment string, since time.Time) (ClientCert, *ClientCert, error)
	// AddClientCertificate stores c as the current certificate unless the
	// merchant has one in its environment already (then it does nothing).
	AddClientCertificate(ctx context.Context, c ClientCert) error
	// RotateClientCertificate retires the current certificate at c.CreatedAt
	// and makes c current; retired ones older than before are deleted.
	RotateClientCertificate(ctx context.Context, c ClientCert, before time.Time) error
}

// clientCertAAD binds a sealed private key to its certificate.
func clientCertAAD(c ClientCert) []byte {
	return keyring.AssociatedData("webhook client certificate key", c.MerchantID, c.Environment, c.ID)
}

// NewClientCert makes a client certificate for the merchant's environment:
// an ECDSA P-256 key and a self-signed certificate for client
// authentication, valid ClientCertValidity from now, whose subject names the
// merchant.
func NewClientCert(keys *keyring.Keyring, merchantID, environment string, now time.Time) (ClientCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return ClientCert{}, fmt.Errorf("webhooks: client certificate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return ClientCert{}, fmt.Errorf("webhooks: client certificate serial: %w", err)
	}
	now = now.UTC().Truncate(time.Second)
	c := ClientCert{ID: ids.New("wcc"), MerchantID: merchantID, Environment: environment,
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(ClientCertValidity), CreatedAt: now}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{CommonName: merchantID, Organization: []string{"Gatehouse webhooks"},
			OrganizationalUnit: []string{environment}},
		NotBefore:             c.NotBefore,
		NotAfter:              c.NotAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		// Self-signed: a receiver trusts this very certificate (its
		// ClientCAs), which Go, OpenSSL and others accept as a CA of one.
		IsCA: true, MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return ClientCert{}, fmt.Errorf("webhooks: client certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return ClientCert{}, fmt.Errorf("webhooks: client certificate key: %w", err)
	}
	sum := sha256.Sum256(der)
	c.Fingerprint = hex.EncodeToString(sum[:])
	c.CertificatePEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	if c.KeySealed, err = keys.Seal(keyring.PurposeWebhook, keyDER, clientCertAAD(c)); err != nil {
		return ClientCert{}, fmt.Errorf("webhooks: seal client certificate key: %w", err)
	}
	return c, nil
}

// TLS returns the certificate and its private key, opened, for a TLS
// handshake.
func (c ClientCert) TLS(keys *keyring.Keyring) (tls.Certificate, error) {
	keyDER, err := keys.Open(keyring.PurposeWebhook, c.KeySealed, clientCertAAD(c))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("webhooks: open client certificate key %s: %w", c.ID, err)
	}
	block, _ := pem.Decode([]byte(c.CertificatePEM))
	if block == nil {
		return tls.Certificate{}, fmt.Errorf("webhooks: client certificate %s: no PEM block", c.ID)
	}
	key, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("webhooks: client certificate key %s: %w", c.ID, err)
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("webhooks: client certificate %s: %w", c.ID, err)
	}
	return tls.Certificate{Certificate: [][]byte{block.Bytes}, PrivateKey: key, Leaf: leaf}, nil
}

// currentClientCert returns the merchant's current client certificate in
// the environment, made and stored on first need, and the previous one
// still shown (retired after since).
func currentClientCert(ctx context.Context, store ClientCertStore, keys *keyring.Keyring, merchantID, environment string, now, since time.Time) (ClientCert, *ClientCert, error) {
	cur, prev, err := store.ClientCertificate(ctx, merchantID, environment, since)
	if err == nil || apperr.KindOf(err) != apperr.KindNotFound {
		return cur, prev, err
	}
	c, err := NewClientCert(keys, merchantID, environment, now)
	if err != nil {
		return ClientCert{}, nil, apperr.Internal(err)
	}
	// Two first needs at once both make one; the store keeps the first.
	if err := store.AddClientCertificate(ctx, c); err != nil {
		return ClientCert{}, nil, err
	}
	return store.ClientCertificate(ctx, merchantID, environment, since)
}

// View returns the public form: the certificate, never its key.
func (c ClientCert) View() resource.WebhookClientCertificateDetails {
	return resource.WebhookClientCertificateDetails{Certificate: c.CertificatePEM, FingerprintSHA256: c.Fingerprint,
		NotBefore: events.Timestamp(c.NotBefore), NotAfter: events.Timestamp(c.NotAfter), CreatedAt: events.Timestamp(c.CreatedAt)}
}

// certView is the answer of GET and rotate: the current certificate and
// the previous one, if still shown.
func certView(cur ClientCert, prev *ClientCert) resource.WebhookClientCertificate {
	v := resource.WebhookClientCertificate{Object: "webhook_client_certificate", WebhookClientCertificateDetails: cur.View()}
	if prev != nil {
		p := prev.View()
		v.Previous = &p
	}
	return v
}

// errNoCertStore: the service was built without a certificate store.
var errNoCertStore = errors.New("webhooks: no client certificate store")

// ClientCertificate returns the merchant's client certificate for the
// environment (made on first need) and the previous one for
// ClientCertOverlap after a rotation.
func (s *Service) ClientCertificate(ctx context.Context, merchantID, environment string) (resource.WebhookClientCertificate, error) {
	if s.certs == nil {
		return resource.WebhookClientCertificate{}, apperr.Internal(errNoCertStore)
	}
	now := s.stamp()
	cur, prev, err := currentClientCert(ctx, s.certs, s.keys, merchantID, environment, now, now.Add(-ClientCertOverlap))
	if err != nil {
		return resource.WebhookClientCertificate{}, err
	}
	return certView(cur, prev), nil
}

// RotateClientCertificate makes a new client certificate that deliveries
// present from now on; the replaced one is shown as previous for
// ClientCertOverlap.
func (s *Service) RotateClientCertificate(ctx context.Context, merchantID, environment string) (resource.WebhookClientCertificate, error) {
	if s.certs == nil {
		return resource.WebhookClientCertificate{}, apperr.Internal(errNoCertStore)
	}
	now := s.stamp()
	c, err := NewClientCert(s.keys, merchantID, environment, now)
	if err != nil {
		return resource.WebhookClientCertificate{}, apperr.Internal(err)
	}
	since := now.Add(-ClientCertOverlap)
	if err := s.certs.RotateClientCertificate(ctx, c, since); err != nil {
		return resource.WebhookClientCertificate{}, err
	}
	cur, prev, err := s.certs.ClientCertificate(ctx, merchantID, environment, since)
	if err != nil {
		return resource.WebhookClientCertificate{}, err
	}
	return certView(cur, prev), nil
}

// WithClientCertificates gives the service the store of client
// certificates (GET and rotate of /v1/me/webhook_client_certificate).
func (s *Service) WithClientCertificates(certs ClientCertStore) *Service {
	s.certs = certs
	return s
}
