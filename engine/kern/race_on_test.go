//go:build race

package kern

// raceOn: the race detector drops a random share of sync.Pool's items, so counts of
// allocations are not the code's.
const raceOn = true
