package server_test

import (
	"crypto/sha256"
	"encoding/hex"
)

func hashKey(k string) string {
	s := sha256.Sum256([]byte(k))
	return hex.EncodeToString(s[:])
}
