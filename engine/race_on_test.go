//go:build race

package engine

// raceOn: the race detector's shadow memory multiplies a process's RSS (TestLoadPeakRSS
// read 1595 MiB against a bound of 727 under -race), so peak-RSS bounds do not hold.
const raceOn = true
