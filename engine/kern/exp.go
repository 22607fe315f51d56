package kern

import "math"

// Exp sets dst[i] = exp(src[i]·scale + bias) over len(src) (dst may alias src). float32
// takes Cephes' expf, eight lanes at a time where the machine has AVX2 (about 1 ulp:
// softmax, SiLU and the loss's gradient need no better, and the libm call per element
// cost a tenth of a training step); float64 is math.Exp. Inputs past ±88.38 clamp there,
// so a float32 result is 0 below and about 2.4e38 above.
func Exp[T Float](dst, src []T, scale, bias T) {
	if d32, ok := any(dst).([]float32); ok {
		s32 := any(src).([]float32)
		d32 = d32[:len(s32)]
		n8 := 0
		if useAVX2 {
			n16 := 0
			if useAVX512 {
				// Sixteen lanes where the machine has them: twice exp32AVX's elements
				// per instruction (attention's softmax rows, the loss head's logits).
				n16 = len(s32) &^ 15
				if n16 > 0 {
					exp32AVX512(&d32[0], &s32[0], n16, float32(scale), float32(bias))
				}
			}
			n8 = len(s32) &^ 7
			if n8 > n16 {
				exp32AVX(&d32[n16], &s32[n16], n8-n16, float32(scale), float32(bias))
			}
		}
		for i := n8; i < len(s32); i++ {
			d32[i] = exp32Go(s32[i]*float32(scale) + float32(bias))
		}
		return
	}
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i] = T(math.Exp(float64(x*scale + bias)))
	}
}

// exp32Go is exp32AVX's algorithm for one element.
func exp32Go(x float32) float32 {
	x = min(max(x, -88.3762626647949), 88.3762626647949)
	fx := float32(math.Floor(float64(x*1.44269504088896341 + 0.5)))
	x -= fx * 0.693359375
	x -= fx * -2.12194440e-4
	z := x * x
	y := float32(1.9875691500e-4)
	y = y*x + 1.3981999507e-3
	y = y*x + 8.3334519073e-3
	y = y*x + 4.1665795894e-2
	y = y*x + 1.6666665459e-1
	y = y*x + 5.0000001201e-1
	y = y*z + x + 1
	return y * math.Float32frombits(uint32(int32(fx)+127)<<23)
}
