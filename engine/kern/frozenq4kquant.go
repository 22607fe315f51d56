package kern

import (
	"encoding/binary"
	"math"
)

// The quantisers into this package's GGUF block formats beside Q8_0 and Q4_1 (those are in
// frozen.go): ggml's reference quantisers for Q4_K, Q6_K and Q5_0, byte for byte
// (TestKQuantsAreGGMLs, against blocks written by llama.cpp's libggml).

// nearestInt is llama.cpp's nearest_int: float32 rounded half to even.
func nearestInt(v float32) int { return int(math.RoundToEven(float64(v))) }

// quantQ5 is llama.cpp's quantize_row_q5_0_ref for one block.
func quantQ5(dst []byte, x []float32) {
	var amax, vmax float32
	for _, v := range x[:QBlock] {
		if a := float32(math.Abs(float64(v))); amax < a {
			amax, vmax = a, v
		}
	}
	d := vmax / -16
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(dst, ToF16(d))
	var qh uint32
	for j := 0; j < QBlock/2; j++ {
		x0, x1 := x[j]*id, x[j+QBlock/2]*id
		xi0 := uint8(min(31, int8(x0+16.5)))
		xi1 := uint8(min(31, int8(x1+16.5)))
		dst[6+j] = xi0&0xF | (xi1&0xF)<<4
		qh |= uint32(xi0&0x10) >> 4 << j
		qh |= uint32(xi1&0x10) >> 4 << (j + QBlock/2)
	}
	binary.LittleEndian.PutUint32(dst[2:], qh)
}

// quantQ4K is llama.cpp's quantize_row_q4_K_ref for one super-block (x: 256 weights,
// dst: 144 bytes).
func quantQ4K(dst []byte, x []float32) {
	var L [QKBlock]uint8
	var laux [32]uint8
	var weights [32]float32
	var mins, scales [QKBlock / 32]float32
	var maxScale, maxMin float32
	for j := 0; j < QKBlock/32; j++ {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += v * v
		}
		avX := float32(math.Sqrt(float64(sumX2 / 32)))
		for l, v := range xs {
			weights[l] = avX + float32(math.Abs(float64(v)))
		}
		scales[j], mins[j] = makeQKX2Quants(15, xs, weights[:], L[32*j:32*j+32], laux[:], -1, 0.1, 20)
		maxScale = max(maxScale, scales[j])
		maxMin = max(maxMin, mins[j])
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	sc := dst[4:16]
	clear(sc)
	for j := 0; j < QKBlock/32; j++ {
		ls := uint8(min(63, nearestInt(invScale*scales[j])))
		lm := uint8(min(63, nearestInt(invMin*mins[j])))
		if j < 4 {
			sc[j], sc[j+4] = ls, lm
		} else {
			sc[j+4] = ls&0xF | (lm&0xF)<<4
			sc[j-4] |= (ls >> 4) << 6
			sc[j] |= (lm >> 4) << 6
		}
	}
	binary.LittleEndian.PutUint16(dst, ToF16(maxScale/63))
	binary.LittleEndian.PutUint16(dst[2:], ToF16(maxMin/63))
	dh, dminh := FromF16(binary.LittleEndian.Uint16(dst)), FromF16(binary.LittleEndian.Uint16(dst[2:]))
	for j := 0; j < QKBlock/32; j++ {
		s, m := scaleMinK4(j, sc)
		d := dh * float32(s)
		if d == 0 {
			continue
		}
		dm := dminh * float32(m)
		for ii := 0; ii < 32; ii++ {
			l := nearestInt((x[32*j+ii] + dm) / d)
			L[32*j+ii] = uint8(max(0, min(15, l)))
		}
	}
	q := dst[16:144]
	for j := 0; j < QKBlock; j += 64 {
		for l := 0; l < 32; l++ {
			q[l] = L[j+l] | L[j+l+32]<<4
		}
		q = q[32:]
	}
}

// makeQKX2Quants is llama.cpp's make_qkx2_quants (squared error, not absolute): the
// scale and (negated) minimum of levels 0…nmax that minimise the weighted error over a
// grid of nstep+1 candidate scales around (max−min)/nmax, the levels left in l.
func makeQKX2Quants(nmax int, x, weights []float32, l, laux []uint8, rmin, rdelta float32, nstep int) (scale, theMin float32) {
	n := len(x)
	vmin, vmax := x[0], x[0]
	sumW := weights[0]
	sumX := sumW * x[0]
	for i := 1; i < n; i++ {
		vmin, vmax = min(vmin, x[i]), max(vmax, x[i])
		w := weights[i]
		sumW += w
		sumX += w * x[i]
	}
	if vmin > 0 {
		vmin = 0
	}
	if vmax == vmin {
		clear(l[:n])
		return 0, -vmin
	}
	fmax := float32(nmax)
	iscale := fmax / (vmax - vmin)
	scale = 1 / iscale
	var bestError float32
	for i := 0; i < n; i++ {
		q := max(0, min(nmax, nearestInt(iscale*(x[i]-vmin))))
		l[i] = uint8(q)
		diff := scale*float32(q) + vmin - x[i]
		bestError += weights[i] * (diff * diff)
	}
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + rdelta*float32(is) + fmax) / (vmax - vmin)
		var sumL, sumL2, sumXL float32
		for i := 0; i < n; i++ {
			q := max(0, min(nmax, nearestInt(iscale*(x[i]-vmin))))
			laux[i] = uint8(q)
			w, lf := weights[i], float32(q)
			sumL += w * lf
			sumL2 += w * lf * lf
			sumXL += w * lf * x[i]
		}
		D := sumW*sumL2 - sumL*sumL
		if D > 0 {
			thisScale := (sumW*sumXL - sumX*sumL) / D
			thisMin := (sumL2*sumX - sumL*sumXL) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var mad float32
			for i := 0; i < n; i++ {
				diff := thisScale*float32(laux[i]) + thisMin - x[i]
				mad += weights[i] * (diff * diff)
			}
			if mad < bestError {
				copy(l[:n], laux[:n])
				bestError, scale, vmin = mad, thisScale, thisMin
			}
		}
	}
	return scale, -vmin
}

// groupMaxEps is ggml's GROUP_MAX_EPS: a group whose largest magnitude is below it is
// stored as zeros.
const groupMaxEps = 1e-15

// quantQ6K is llama.cpp's quantize_row_q6_K_ref for one super-block (x: 256 weights,
// dst: 210 bytes): per group of 16 a scale from makeQXQuants (nmax 32, weights x²), the
// sixteen scales quantised to int8 under one half d, then each weight rounded to
// [−32, 31] at its group's d·sc and stored offset by 32 as four low bits (ql) and two
// high ones (qh).
func quantQ6K(dst []byte, x []float32) {
	var L [QKBlock]int8
	var scales [QKBlock / 16]float32
	var maxScale, maxAbsScale float32
	for ib := 0; ib < QKBlock/16; ib++ {
		s := makeQXQuants(32, x[16*ib:16*ib+16], L[16*ib:16*ib+16])
		scales[ib] = s
		if a := float32(math.Abs(float64(s))); a > maxAbsScale {
			maxAbsScale, maxScale = a, s
		}
	}
	dst = dst[:210]
	if maxAbsScale < groupMaxEps {
		clear(dst)
		return
	}
	iscale := -128 / maxScale
	binary.LittleEndian.PutUint16(dst[208:], ToF16(1/iscale))
	sc := dst[192:208]
	for ib := range scales {
		sc[ib] = byte(int8(min(127, nearestInt(iscale*scales[ib]))))
	}
	dh := FromF16(binary.LittleEndian.Uint16(dst[208:]))
	for j := 0; j < QKBlock/16; j++ {
		d := dh * float32(int8(sc[j]))
		if d == 0 {
			continue
		}
		for ii := 0; ii < 16; ii++ {
			l := nearestInt(x[16*j+ii] / d)
			L[16*j+ii] = int8(max(-32, min(31, l)) + 32)
		}
	}
	ql, qh := dst[0:128], dst[128:192]
	for j := 0; j < QKBlock; j += 128 {
		for l := 0; l < 32; l++ {
			q1, q2, q3, q4 := uint8(L[j+l]), uint8(L[j+l+32]), uint8(L[j+l+64]), uint8(L[j+l+96])
			ql[l] = q1&0xF | (q3&0xF)<<4
			ql[l+32] = q2&0xF | (q4&0xF)<<4
			qh[l] = q1>>4 | (q2>>4)<<2 | (q3>>4)<<4 | (q4>>4)<<6
		}
		ql, qh = ql[64:], qh[32:]
	}
}

// makeQXQuants is llama.cpp's make_qx_quants with rmse_type 1 and no importance weights
// (the form quantize_row_q6_K_ref calls): levels l ∈ [−nmax, nmax−1] (stored in L as
// l + nmax) and the scale that minimises Σ x²·(x − scale·l)² over 19 candidate inverse
// scales around −nmax/max. Each product is rounded before it is summed (float32(…)), as
// ggml's C computes it, so an arm64 build does not fuse it into a multiply-add.
func makeQXQuants(nmax int, x []float32, L []int8) float32 {
	var maxV, amax float32
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, maxV = a, v
		}
	}
	if amax < groupMaxEps {
		clear(L[:len(x)])
		return 0
	}
	fmax := float32(nmax)
	iscale := -fmax / maxV
	var sumlx, suml2 float32
	for i, v := range x {
		l := max(-nmax, min(nmax-1, nearestInt(iscale*v)))
		L[i] = int8(l + nmax)
		w, lf := v*v, float32(l)
		sumlx += float32(w * v * lf)
		suml2 += float32(w * lf * lf)
	}
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	best := scale * sumlx
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fmax + float32(0.1)*float32(is)) / maxV
		sumlx, suml2 = 0, 0
		for _, v := range x {
			l := max(-nmax, min(nmax-1, nearestInt(iscale*v)))
			w, lf := v*v, float32(l)
			sumlx += float32(w * v * lf)
			suml2 += float32(w * lf * lf)
		}
		if suml2 > 0 && float32(sumlx*sumlx) > float32(best*suml2) {
			for i, v := range x {
				L[i] = int8(nmax + max(-nmax, min(nmax-1, nearestInt(iscale*v))))
			}
			scale = sumlx / suml2
			best = scale * sumlx
		}
	}
	return scale
}
