package testenv

import (
	"github.com/tuft-go/tuft/config"
	"github.com/tuft-go/tuft/futures"
	"github.com/tuft-go/tuft/store"
)

// FuturesOptions is a futures.Manager's options for a test that builds the service by
// hand: the numbers of cfg (futures.OptionsFrom, as the server takes them; futures.New
// keeps no defaults) over st, with one blocking worker (and one completion worker), the
// order those tests are written against.
func FuturesOptions(cfg config.Config, st store.Store) futures.Options {
	o := futures.OptionsFrom(cfg)
	o.Store, o.Workers = st, 1
	return o
}
