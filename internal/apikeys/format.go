package apikeys

import (
	"hash/crc32"
	"strings"
)

// Key formats (docs/keys.md). A secret or restricted key is its prefix, 30
// random base62 characters and a checksum of those 30: their CRC-32 (IEEE)
// in base62, 6 characters, most significant first, padded with zeros. Keys
// issued before checksums are "sk_test_" and 32 random base62 characters;
// they keep working, and the two are told apart by their length.
const (
	randomLen   = 30
	checksumLen = 6
	legacyLen   = 32
)

// Restricted key prefixes. Live is refused in this instance.
const (
	RestrictedTestPrefix = "rk_test_"
	RestrictedLivePrefix = "rk_live_"
)

// checksum is the 6-character base62 CRC-32 of random.
func checksum(random string) string {
	n := crc32.ChecksumIEEE([]byte(random))
	var out [checksumLen]byte
	for i := checksumLen - 1; i >= 0; i-- {
		out[i] = alphabet[n%62]
		n /= 62
	}
	return string(out[:])
}

// newSecret is a new key of the checksummed format under prefix.
func newSecret(prefix string) string {
	r := randomToken(randomLen)
	return prefix + r + checksum(r)
}

func base62(s string) bool {
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !('0' <= b && b <= '9' || 'A' <= b && b <= 'Z' || 'a' <= b && b <= 'z') {
			return false
		}
	}
	return true
}

// Lookable reports whether secret can be a key this instance issued, and so
// is worth looking up: a sandbox secret or restricted key of the
// checksummed format whose checksum matches, or a secret key of the format
// before checksums. Anything else, a made-up key with a wrong checksum
// above all, is invalid_token without a lookup: it costs neither Redis nor
// Postgres.
func Lookable(secret string) bool {
	body, restricted := strings.CutPrefix(secret, RestrictedTestPrefix)
	if !restricted {
		var ok bool
		if body, ok = strings.CutPrefix(secret, SecretTestPrefix); !ok {
			return false
		}
	}
	switch len(body) {
	case randomLen + checksumLen:
		return base62(body) && checksum(body[:randomLen]) == body[randomLen:]
	case legacyLen:
		return !restricted && base62(body)
	}
	return false
}

// Forged reports whether token is shaped like a secret or restricted
// sandbox key but cannot be one (Lookable is false): refused before any
// lookup, it is not worth counting against its address either.
func Forged(token string) bool {
	return (strings.HasPrefix(token, SecretTestPrefix) || strings.HasPrefix(token, RestrictedTestPrefix)) && !Lookable(token)
}
