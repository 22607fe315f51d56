package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv"
)

func TestSFTExample(t *testing.T) {
	s := testenv.Start(t, testenv.Config(t, t.TempDir(), "memory"))
	var out bytes.Buffer
	if err := run(context.Background(), s.URL(), testenv.KeyA, testenv.Model, 40, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "Paris") {
		t.Fatalf("the model did not learn the fact:\n%s", out.String())
	}
	t.Log("\n" + out.String())
}
