package persistence_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/store/persistence"
)

func TestOpenEachMode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for mode, kind := range map[string]string{"embedded": "tuft-embedded", "memory": "memory"} {
		st, err := persistence.Open(ctx, config.Persistence{Mode: mode, Path: filepath.Join(t.TempDir(), "tuft.db"), Namespace: "t"})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if st.Kind() != kind {
			t.Errorf("%s opened %q", mode, st.Kind())
		}
		if err := st.Set(ctx, "k", []byte("v"), 0); err != nil {
			t.Errorf("%s: %v", mode, err)
		}
		st.Close()
	}
	if _, err := persistence.Open(ctx, config.Persistence{Mode: "floppy"}); err == nil || !strings.Contains(err.Error(), "persistence.mode") {
		t.Fatalf("unknown mode: %v", err)
	}
}
