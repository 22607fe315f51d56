package service

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tuft-go/tuft/store"
)

// signer makes and checks the signed tokens of archive URLs, file downloads and trace
// links: an expiry and a payload under an HMAC of a secret every replica shares
// (keySecret in the store).
type signer struct {
	secret []byte
	now    func() time.Time
}

// sign makes a token of an expiry and a payload: both, then their HMAC.
func (s *signer) sign(exp time.Time, payload string) string {
	buf := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint64(buf, uint64(exp.Unix()))
	buf = append(buf, payload...)
	mac := hmac.New(sha256.New, s.secret)
	mac.Write(buf)
	return base64.RawURLEncoding.EncodeToString(buf) + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// verify returns a valid, unexpired token's payload.
func (s *signer) verify(tok string) (string, error) {
	a, b, ok := strings.Cut(tok, ".")
	if !ok {
		return "", ErrBadToken
	}
	buf, err1 := base64.RawURLEncoding.DecodeString(a)
	sig, err2 := base64.RawURLEncoding.DecodeString(b)
	if err1 != nil || err2 != nil || len(buf) < 9 {
		return "", ErrBadToken
	}
	mac := hmac.New(sha256.New, s.secret)
	mac.Write(buf)
	if !hmac.Equal(sig, mac.Sum(nil)) {
		return "", ErrBadToken
	}
	if s.now().Unix() > int64(binary.BigEndian.Uint64(buf[:8])) {
		return "", ErrBadToken
	}
	return string(buf[8:]), nil
}

// load reads the shared secret, or makes and stores one (the first replica to start
// wins; the others read its).
func (s *signer) load(ctx context.Context, st store.Store) error {
	b, err := st.Get(ctx, keySecret)
	if err == nil && len(b) >= 32 {
		s.secret = b
		return nil
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("read archive secret: %w", err)
	}
	s.secret = make([]byte, 32)
	if _, err := rand.Read(s.secret); err != nil {
		return err
	}
	ok, err := st.SetNX(ctx, keySecret, s.secret, 0)
	if err != nil {
		return fmt.Errorf("persist archive secret: %w", err)
	}
	if !ok { // another replica won the race
		b, err := st.Get(ctx, keySecret)
		if err != nil {
			return fmt.Errorf("read archive secret: %w", err)
		}
		s.secret = b
	}
	return nil
}
