package adversarial

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/tuft-go/tuft/internal/testenv"
)

// jsonTokensBody is a forward_backward JSON body of about size bytes: one datum whose
// tokens and target tokens are long arrays of small integers (the cheapest bytes to
// send, the most expensive to decode generically).
func jsonTokensBody(model string, size int) []byte {
	n := size / 8 // "123," twice per position
	var b bytes.Buffer
	b.Grow(size + 512)
	b.WriteString(`{"model_id": "` + model + `", "seq_id": 1, "forward_backward_input": {"loss_fn": "cross_entropy", "data": [{"model_input": {"chunks": [{"type": "encoded_text", "tokens": [`)
	list := func() {
		for i := 0; i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(100 + i%900))
		}
	}
	list()
	b.WriteString(`]}]}, "loss_fn_inputs": {"target_tokens": {"dtype": "int64", "data": [`)
	list()
	b.WriteString(`]}}}]}}`)
	return b.Bytes()
}

// What a body costs the server in memory is bounded by its size: a large forward_backward
// about another tenant's run costs its bytes (it is refused before it is decoded); one
// about the sender's own run costs a few times its bytes to decode (it was over ten
// times); a zstd bomb is stopped at limits.max_decompression_ratio. Each is sent to a
// fresh server, and the peak RSS of the process over its idle RSS is measured.
func TestDecodeAndDecompressionMemoryIsBounded(t *testing.T) {
	const size = 48 << 20
	measure := func(name string, body func(own, foreign string) []byte, header map[string]string, wantStatus int) (grewMiB, ratio float64) {
		t.Helper()
		p, _ := launch(t, t.TempDir(), configYAML(t, testenv.FreePort(t), "", ""))
		defer p.kill()
		a, b := newTenant(t, p.base, testenv.KeyA), newTenant(t, p.base, testenv.KeyB)
		own := a.model(a.session(), 0)
		foreign := b.model(b.session(), 0)
		data := body(own, foreign)
		idle := p.status("VmRSS")
		p.resetPeak()
		r := a.c.Do("POST", "/api/v1/forward_backward", data, header)
		if r.Status != wantStatus {
			t.Fatalf("%s: %d %s", name, r.Status, r.Body)
		}
		grew := p.status("VmHWM") - idle
		grewMiB, ratio = float64(grew)/1024, float64(grew<<10)/float64(len(data))
		t.Logf("%s: a %.2f MiB body raised the server's peak RSS by %.1f MiB over idle (%.2f× the body)", name, float64(len(data))/(1<<20), grewMiB, ratio)
		return grewMiB, ratio
	}
	if _, r := measure("JSON body about another tenant's run", func(_, foreign string) []byte { return jsonTokensBody(foreign, size) }, nil, http.StatusNotFound); r > 3 {
		t.Errorf("a body about another tenant's run cost %.2f× its size; the bound is 3×", r)
	}
	// The sender's own run: decoded in full, then refused (more tokens than the model's
	// context), so what is measured is the decode.
	if _, r := measure("JSON body about the sender's own run (decoded, then refused)", func(own, _ string) []byte { return jsonTokensBody(own, size) }, nil, http.StatusBadRequest); r > 6 {
		t.Errorf("decoding a JSON body cost %.2f× its size; the bound is 6×", r)
	}
	enc, _ := zstd.NewWriter(nil)
	bomb := enc.EncodeAll(make([]byte, 60<<20), nil)
	if grew, _ := measure("zstd bomb (60 MiB of zeros)", func(string, string) []byte { return bomb }, map[string]string{"Content-Encoding": "zstd", "Content-Type": "application/x-protobuf"},
		http.StatusRequestEntityTooLarge); grew > 16 {
		t.Errorf("a %d-byte zstd bomb raised the peak RSS by %.1f MiB; the bound is 16 MiB", len(bomb), grew)
	}
}
