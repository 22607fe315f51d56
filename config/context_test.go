package config

import "testing"

func TestContextArithmetic(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ cfg, native, want int }{
		{0, 4096, 4096}, {1024, 4096, 1024}, {8192, 4096, 4096}, {1024, 0, 1024}, {0, 0, 0},
	} {
		if got := (Model{MaxContextLength: c.cfg}).ContextLength(c.native); got != c.want {
			t.Errorf("ContextLength(cfg %d, native %d) = %d, want %d", c.cfg, c.native, got, c.want)
		}
	}
	for _, c := range []struct {
		max, prompt, gen int
		want             bool
	}{{0, 1 << 20, 1 << 20, false}, {100, 60, 40, false}, {100, 60, 41, true}} {
		if got := ExceedsContext(c.max, c.prompt, c.gen); got != c.want {
			t.Errorf("ExceedsContext(%d, %d, %d) = %v", c.max, c.prompt, c.gen, got)
		}
	}
	for _, c := range []struct{ max, prompt, limit, want int }{{0, 50, 256, 256}, {100, 60, 256, 40}, {1000, 60, 256, 256}, {100, 120, 256, -20}} {
		if got := ContextRoom(c.max, c.prompt, c.limit); got != c.want {
			t.Errorf("ContextRoom(%d, %d, %d) = %d, want %d", c.max, c.prompt, c.limit, got, c.want)
		}
	}
}
