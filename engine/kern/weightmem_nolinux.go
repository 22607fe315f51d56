//go:build unix && !linux

package kern

// adviseHuge does nothing: huge pages are advised on Linux only.
func adviseHuge([]byte) {}
