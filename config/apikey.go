package config

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
)

// KeyDigest is the SHA-256 of an API key: what auth.api_keys stores (as key_sha256) and
// what the server compares, so a key never has to be kept in clear. It is the one
// definition of how keys are hashed and generated, used by the service's
// authentication, the server's generated default key, `tuft key` and the test servers.
type KeyDigest [sha256.Size]byte

// APIKeyPrefix starts every key tuft generates (the Tinker SDK's convention).
const APIKeyPrefix = "tml-"

// HashAPIKey is the digest of key.
func HashAPIKey(key string) KeyDigest { return sha256.Sum256([]byte(key)) }

// ParseKeyDigest reads a key_sha256 value (64 hex digits).
func ParseKeyDigest(s string) (KeyDigest, error) {
	var d KeyDigest
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(d) {
		return d, fmt.Errorf("key_sha256 %q is not 64 hex digits", s)
	}
	copy(d[:], b)
	return d, nil
}

// String is the key_sha256 form: lower-case hex.
func (d KeyDigest) String() string { return hex.EncodeToString(d[:]) }

// Equal compares two digests in constant time.
func (d KeyDigest) Equal(o KeyDigest) bool { return subtle.ConstantTimeCompare(d[:], o[:]) == 1 }

// NewAPIKey generates a random key (APIKeyPrefix and 48 hex digits) and its digest.
func NewAPIKey() (string, KeyDigest, error) {
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", KeyDigest{}, fmt.Errorf("generate API key: %w", err)
	}
	key := APIKeyPrefix + hex.EncodeToString(raw)
	return key, HashAPIKey(key), nil
}
