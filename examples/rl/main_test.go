package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv"
)

func TestRLExample(t *testing.T) {
	s := testenv.Start(t, testenv.Config(t, t.TempDir(), "memory"))
	var out bytes.Buffer
	r, err := run(context.Background(), s.URL(), testenv.KeyA, testenv.Model, 10, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	if !(r[1] > r[0]) {
		t.Fatalf("the mean reward did not rise: %v", r)
	}
}
