package kern

import "testing"

// share's chunks: a count the goroutines divide evenly where the bounds allow, never a
// busier goroutine than the quarter-share rule gives, and always whole tiles within
// [least, mc].
func TestShareGrain(t *testing.T) {
	for _, c := range []struct{ n, w, align, least, want int }{
		{128, 2, mr, 8 * mr, 66},     // a 128-token prompt: two chunks, not 48+48+32
		{512, 2, mr, 8 * mr, 66},     // eight chunks already
		{2048, 2, mr, 8 * mr, 144},   // fifteen chunks of mc, the last of 32: the busiest gets 1040 of 2048
		{96, 2, mr, 8 * mr, 48},      // the fewest rows that split
		{128, 2, 2 * mr, 8 * mr, 72}, // the 12-row tile: 72 + 56
		{36, 2, 1, 1, 5},             // panels: eight chunks of 5 rows (the last of 1)
		{300, 3, mr, 8 * mr, 54},     // three goroutines: six chunks
	} {
		if got := shareGrain(c.n, c.w, c.align, c.least); got != c.want {
			t.Errorf("shareGrain(n %d, w %d, align %d, least %d) = %d, want %d", c.n, c.w, c.align, c.least, got, c.want)
		}
	}
	for n := 1; n <= 3000; n += 7 {
		for w := 2; w <= 5; w++ {
			for _, al := range []struct{ align, least int }{{mr, 8 * mr}, {2 * mr, 8 * mr}, {1, 1}, {16, 16}} {
				g := shareGrain(n, w, al.align, al.least)
				old := roundUp(max((n+4*w-1)/(4*w), al.least), al.align)
				if al.align%mr == 0 {
					old = min(old, mc)
				}
				if g%al.align != 0 || g < min(al.least, old) || al.align%mr == 0 && g > mc {
					t.Fatalf("n %d w %d %+v: grain %d breaks the bounds", n, w, al, g)
				}
				if busiest(n, g, w) > busiest(n, old, w) {
					t.Fatalf("n %d w %d %+v: grain %d gives a busier goroutine (%d) than %d (%d)", n, w, al, g, busiest(n, g, w), old, busiest(n, old, w))
				}
			}
		}
	}
	if b := busiest(128, 48, 2); b != 80 {
		t.Errorf("busiest(128, 48, 2) = %d, want 80 (chunks 0 and 2: 48 + 32)", b)
	}
}
