package kern

import "syscall"

// adviseHuge asks Linux to back b with transparent huge pages (MADV_HUGEPAGE), which it
// does where /sys/kernel/mm/transparent_hugepage/enabled is "always" or "madvise".
// Advice only: refused, the memory works as before.
func adviseHuge(b []byte) { _ = syscall.Madvise(b, syscall.MADV_HUGEPAGE) }
