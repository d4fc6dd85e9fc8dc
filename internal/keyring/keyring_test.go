package keyring

import (
	"bytes"
	"sync"
	"testing"
)

func TestSealOpen(t *testing.T) {
	k, err := New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := k.Seal(PurposeCard, []byte("4242424242424242"), []byte("ch_1"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("4242")) {
		t.Fatal("sealed data holds the plaintext")
	}
	got, err := k.Open(PurposeCard, sealed, []byte("ch_1"))
	if err != nil || string(got) != "4242424242424242" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	for name, open := range map[string]func() ([]byte, error){
		"other owner":   func() ([]byte, error) { return k.Open(PurposeCard, sealed, []byte("ch_2")) },
		"other purpose": func() ([]byte, error) { return k.Open(PurposeWebhook, sealed, []byte("ch_1")) },
		"tampered": func() ([]byte, error) {
			b := bytes.Clone(sealed)
			b[len(b)-1] ^= 1
			return k.Open(PurposeCard, b, []byte("ch_1"))
		},
		"truncated": func() ([]byte, error) { return k.Open(PurposeCard, sealed[:5], []byte("ch_1")) },
	} {
		if _, err := open(); err == nil {
			t.Errorf("%s: opened", name)
		}
	}
	other, _ := New(bytes.Repeat([]byte{8}, 32))
	if _, err := other.Open(PurposeCard, sealed, []byte("ch_1")); err == nil {
		t.Error("another master key opened it")
	}
}

func TestMAC(t *testing.T) {
	k, _ := New(bytes.Repeat([]byte{7}, 32))
	a := k.MAC(PurposeFingerprint, []byte("mer_1"), []byte("4242"))
	if !bytes.Equal(a, k.MAC(PurposeFingerprint, []byte("mer_1"), []byte("4242"))) {
		t.Fatal("MAC is not deterministic")
	}
	for name, b := range map[string][]byte{
		"other split":    k.MAC(PurposeFingerprint, []byte("mer_14"), []byte("242")),
		"other purpose":  k.MAC(PurposeIdempotency, []byte("mer_1"), []byte("4242")),
		"other merchant": k.MAC(PurposeFingerprint, []byte("mer_2"), []byte("4242")),
	} {
		if bytes.Equal(a, b) {
			t.Errorf("%s gives the same MAC", name)
		}
	}
	if _, err := New(make([]byte, 31)); err == nil {
		t.Error("a 31-byte master key was accepted")
	}
}

// Derived keys are cached; concurrent first use must be safe.
func TestConcurrentUse(t *testing.T) {
	k, _ := New(bytes.Repeat([]byte{9}, 32))
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := k.Seal(PurposeCard, []byte("x"), nil)
			if err != nil {
				t.Error(err)
				return
			}
			if p, err := k.Open(PurposeCard, s, nil); err != nil || string(p) != "x" {
				t.Errorf("round trip: %q %v", p, err)
			}
		}()
	}
	wg.Wait()
}

// A data key seals under its own key: what it sealed opens with the key
// unwrapped under the same purpose and owner, never with the derived keys,
// another data key, or the key unwrapped for another owner.
func TestDataKey(t *testing.T) {
	k, err := New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	owner := AssociatedData("payment_method", "pm_1", "mer_1")
	dk, wrapped, err := k.NewDataKey(PurposeCardDataKey, owner)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := dk.Seal([]byte("4242424242424242"), owner)
	if err != nil {
		t.Fatal(err)
	}
	again, err := k.OpenDataKey(PurposeCardDataKey, wrapped, owner)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := again.Open(sealed, owner); err != nil || string(got) != "4242424242424242" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	other, _, err := k.NewDataKey(PurposeCardDataKey, owner)
	if err != nil {
		t.Fatal(err)
	}
	for name, open := range map[string]func() ([]byte, error){
		"another data key": func() ([]byte, error) { return other.Open(sealed, owner) },
		"the card key":     func() ([]byte, error) { return k.Open(PurposeCard, sealed, owner) },
		"another owner":    func() ([]byte, error) { return dk.Open(sealed, AssociatedData("payment_method", "pm_1", "mer_2")) },
		"the key unwrapped for another owner": func() ([]byte, error) {
			_, err := k.OpenDataKey(PurposeCardDataKey, wrapped, AssociatedData("payment_method", "pm_2", "mer_1"))
			return nil, err
		},
		"the key unwrapped for another purpose": func() ([]byte, error) {
			_, err := k.OpenDataKey(PurposeCard, wrapped, owner)
			return nil, err
		},
		"no key": func() ([]byte, error) { return DataKey{}.Open(sealed, owner) },
	} {
		if _, err := open(); err == nil {
			t.Errorf("%s: opened", name)
		}
	}
	if bytes.Equal(AssociatedData("ab", "c"), AssociatedData("a", "bc")) {
		t.Error("AssociatedData: two splits collide")
	}
}
