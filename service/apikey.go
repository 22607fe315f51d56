package service

import (
	"encoding/binary"

	"github.com/tuft-go/tuft/config"
)

// The API key routes of the SDK's CLI (tinker auth login / logout): GET and DELETE
// /auth/apikey/me. TuFT's keys are configured (auth.api_keys holds their hashes), never
// minted by the server, so a key describes itself but cannot be deleted through the API.

// KeyInfo describes an API key.
type KeyInfo struct {
	Tenant string
	ID     int64  // derived from the key's hash: stable, and reveals nothing of the key
	Hash   string // hex SHA-256, as auth.api_keys lists it
}

// APIKey describes the key a request authenticated with.
func (s *Service) APIKey(key string) (KeyInfo, bool) {
	tenant, ok := s.Authenticate(key)
	if !ok {
		return KeyInfo{}, false
	}
	h := config.HashAPIKey(key)
	// 48 bits: positive, and exact as a JSON number in every client.
	id := int64(binary.BigEndian.Uint64(h[:8]) >> 16)
	return KeyInfo{Tenant: tenant, ID: id, Hash: h.String()}, true
}

// DeleteAPIKey refuses: every key is configured in the server's config file.
func (s *Service) DeleteAPIKey(key string) error {
	if _, ok := s.Authenticate(key); !ok {
		return &Error{Kind: KindUnauthorized, Msg: "invalid API key"}
	}
	return &Error{Kind: KindForbidden, Msg: "this API key is configured in the server's config (auth.api_keys) and cannot be deleted through the API: " +
		"ask the server's operator to remove it (its key_sha256) and restart the server"}
}
