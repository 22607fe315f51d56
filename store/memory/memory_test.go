package memory_test

import (
	"sync"
	"testing"

	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/store/memory"
	"github.com/tuft-go/tuft/store/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	stores := map[string]store.Store{}
	clock := storetest.NewClock()
	storetest.Run(t, func(t *testing.T, ns string) store.Store {
		mu.Lock()
		defer mu.Unlock()
		key := t.Name() + "/" + ns
		if s, ok := stores[key]; ok {
			return s
		}
		s := store.Instrument(memory.New(memory.WithClock(clock.Now)))
		stores[key] = s
		return s
	}, storetest.WithClock(clock))
}
