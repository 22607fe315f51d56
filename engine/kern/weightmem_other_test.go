//go:build !linux

package kern

import "testing"

// adviceShows is false where huge pages are not advised (weightmem_linux.go).
func adviceShows(*testing.T) bool { return false }

// vmFlags is never asked for off Linux.
func vmFlags(*testing.T, uintptr) string { return "" }
