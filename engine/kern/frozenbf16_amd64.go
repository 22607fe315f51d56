//go:build amd64 && !purego

package kern

// roundBF16AVX sets dst[i] = ToBF16(src[i]) for n a multiple of 8 (AVX2).
//
//go:noescape
func roundBF16AVX(dst *uint16, src *float32, n int)

// roundWideBF16AVX sets dst[i] = FromBF16(ToBF16(src[i])) for n a multiple of 8 (AVX2).
//
//go:noescape
func roundWideBF16AVX(dst, src *float32, n int)
