package kern

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

// adviceShows reports whether a mapping advised for huge pages here shows it in its
// VmFlags: Linux with transparent huge pages on, natively (qemu-user takes the advice
// and drops it).
func adviceShows(t *testing.T) bool {
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || strings.Contains(string(b), "[never]") {
		return false
	}
	m, err := syscall.Mmap(-1, 0, hugePage, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	if err := syscall.Madvise(m, syscall.MADV_HUGEPAGE); err != nil {
		return false
	}
	ok := strings.Contains(vmFlags(t, uintptr(unsafe.Pointer(&m[0]))), " hg")
	if !ok {
		t.Log("huge page advice does not show in this process's VmFlags (emulated?): not checked")
	}
	return ok
}

// vmFlags is the VmFlags line of the mapping holding address p (/proc/self/smaps).
func vmFlags(t *testing.T, p uintptr) string {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			lo, hi, _ := strings.Cut(f[0], "-")
			a, err1 := strconv.ParseUint(lo, 16, 64)
			z, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && uint64(p) >= a && uint64(p) < z
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return line + " "
		}
	}
	t.Fatalf("no mapping holds %#x", p)
	return ""
}
