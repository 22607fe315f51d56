package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/tuft-go/tuft/backend"
	"github.com/tuft-go/tuft/registry"
	"github.com/tuft-go/tuft/store"
	"github.com/tuft-go/tuft/store/memory"
)

var _ backend.RegistrationSource = (*registry.Workers)(nil)

// notifying reports each completed Set, so the test waits for the write, not a clock.
type notifying struct {
	store.Store
	set chan struct{}
}

func (n notifying) Set(ctx context.Context, key string, v []byte, ttl time.Duration) error {
	err := n.Store.Set(ctx, key, v, ttl)
	n.set <- struct{}{}
	return err
}

// A published registration is listed while its publisher runs, and withdrawn when it
// stops; records that do not decode are skipped.
func TestPublishListWithdraw(t *testing.T) {
	t.Parallel()
	st := notifying{memory.New(), make(chan struct{}, 1)}
	w := registry.NewWorkers(st)
	ctx := context.Background()
	if err := st.Store.Set(ctx, "worker/garbage", []byte("{not json"), 0); err != nil {
		t.Fatal(err)
	}
	reg := backend.Registration{Address: "10.0.0.7:10620", Instance: "abc", Models: []string{"m"}, Started: time.Unix(1, 0).UTC()}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.Publish(pctx, reg, time.Hour, func(err error) { t.Error(err) }) }()
	<-st.set // the first write (renewals come every hour)
	regs, err := w.Registrations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(regs) != 1 {
		t.Fatalf("listed %v", regs)
	}
	if got := regs[0]; got.Address != reg.Address || got.Instance != reg.Instance || len(got.Models) != 1 || !got.Started.Equal(reg.Started) {
		t.Fatalf("listed %+v, published %+v", got, reg)
	}
	stop()
	<-done
	if regs, _ := w.Registrations(ctx); len(regs) != 0 {
		t.Fatalf("still listed after the publisher stopped: %v", regs)
	}
}
