//go:build !unix

package main

// maxRSSMiB is 0 (unknown) where getrusage does not exist: the benchmark then reports
// no memory figure.
func maxRSSMiB() float64 { return 0 }

// resetPeakRSS cannot restart a peak without /proc: false.
func resetPeakRSS() bool { return false }

// cpuSeconds is 0 (unknown) without getrusage: no thread-use figure is reported.
func cpuSeconds() float64 { return 0 }
