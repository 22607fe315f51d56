// Package persistence opens the store that tuft_config.yaml's persistence block names:
// the embedded store, Redis or memory. Both processes' composition roots (the API
// server and `tuft worker`, through cmd/tuft) and `tuft clear` open their store here.
package persistence
