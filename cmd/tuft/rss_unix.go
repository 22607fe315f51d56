//go:build unix

package main

import (
	"runtime"
	"syscall"
)

// maxRSSMiB is this process's peak resident set size (ru_maxrss is KiB on Linux).
func maxRSSMiB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	kib := float64(ru.Maxrss)
	if runtime.GOOS == "darwin" {
		kib /= 1024 // bytes there
	}
	return kib / 1024
}
