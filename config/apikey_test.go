package config

import (
	"strings"
	"testing"
)

func TestKeyDigest(t *testing.T) {
	t.Parallel()
	// sha256("abc"), the FIPS 180-2 test vector.
	const abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
	d := HashAPIKey("abc")
	if d.String() != abc {
		t.Fatalf("HashAPIKey(abc) = %s, want %s", d, abc)
	}
	p, err := ParseKeyDigest(abc)
	if err != nil || !p.Equal(d) {
		t.Fatalf("ParseKeyDigest round trip: %v, %v", p, err)
	}
	if p.Equal(HashAPIKey("abd")) {
		t.Fatal("different keys compare equal")
	}
	for _, bad := range []string{"", "zz", abc[:62], abc + "00"} {
		if _, err := ParseKeyDigest(bad); err == nil {
			t.Errorf("ParseKeyDigest(%q) accepted", bad)
		}
	}
	k1, d1, err := NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, _, _ := NewAPIKey()
	if !strings.HasPrefix(k1, APIKeyPrefix) || len(k1) != len(APIKeyPrefix)+48 || k1 == k2 {
		t.Fatalf("NewAPIKey gave %q and %q", k1, k2)
	}
	if !d1.Equal(HashAPIKey(k1)) {
		t.Fatal("NewAPIKey's digest is not the key's hash")
	}
}
