package engine

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/tuft-go/tuft/engine/safetensors"
)

// TestPresetBytesIndependentOfCores writes a streamed preset with one core and with
// four: the files must be byte-identical, and a different seed must change them.
func TestPresetBytesIndependentOfCores(t *testing.T) {
	write := func(procs int, seed uint64) []byte {
		t.Helper()
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		dir := t.TempDir()
		if err := WritePresetSeed("tiny", dir, seed); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := write(1, 7), write(4, 7)
	if !bytes.Equal(a, b) {
		t.Fatal("the same seed wrote different bytes with GOMAXPROCS 1 and 4")
	}
	if bytes.Equal(a, write(2, 8)) {
		t.Fatal("seeds 7 and 8 wrote the same bytes")
	}
}

// TestPresetChunksCompose checks that a chunk's values depend only on their element
// indices (what makes the parallel writer deterministic), in both stored dtypes.
func TestPresetChunksCompose(t *testing.T) {
	for _, dt := range []string{"BF16", "F32"} {
		w := map[string]int{"BF16": 2, "F32": 4}[dt]
		whole := make([]byte, 1000*w)
		if err := fillPreset(dt, presetInit{std: 0.02}, 42, 0, whole); err != nil {
			t.Fatal(err)
		}
		parts := make([]byte, len(whole))
		for _, cut := range [][2]int{{0, 333}, {333, 334}, {334, 1000}} {
			if err := fillPreset(dt, presetInit{std: 0.02}, 42, int64(cut[0]), parts[cut[0]*w:cut[1]*w]); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(whole, parts) {
			t.Fatalf("%s: chunks differ from the whole", dt)
		}
	}
}

// TestPresetDistribution checks the stated distribution: mean 0, the requested standard
// deviation, kurtosis near Irwin–Hall's 2.7, bounded at 2√3 σ.
func TestPresetDistribution(t *testing.T) {
	const n = 1 << 20
	var s1, s2, s4, peak float64
	for i := uint64(0); i < n; i++ {
		z := float64(presetNormal(presetKey(3, "w"), i))
		s1, s2, s4 = s1+z, s2+z*z, s4+z*z*z*z
		peak = math.Max(peak, math.Abs(z))
	}
	mean, variance := s1/n, s2/n
	kurt := (s4 / n) / (variance * variance)
	if math.Abs(mean) > 0.01 || math.Abs(variance-1) > 0.01 || math.Abs(kurt-2.7) > 0.03 || peak > 2*math.Sqrt(3)+1e-6 {
		t.Fatalf("mean %v variance %v kurtosis %v max |z| %v", mean, variance, kurt, peak)
	}
}

// TestPresetLoads writes a streamed bf16 preset and loads it: the header, offsets and
// shapes agree with what the loader expects, norms are ones.
func TestPresetLoads(t *testing.T) {
	dir := t.TempDir()
	if err := WritePresetSeed("tiny", dir, 5); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if m.W.FinalNorm[0] != 1 || m.W.Layers[0].Wq[0] == 0 {
		t.Fatalf("norm %v, q_proj[0] %v", m.W.FinalNorm[0], m.W.Layers[0].Wq[0])
	}
	f, err := safetensors.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Metadata["preset_seed"] != "5" {
		t.Fatalf("metadata %v", f.Metadata)
	}
}

func BenchmarkPresetFill(b *testing.B) {
	buf := make([]byte, safetensors.ChunkBytes)
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		_ = fillPreset("BF16", presetInit{std: 0.02}, 1, int64(i), buf)
	}
}

// TestPresetBF16BytesIndependentOfCores: smollm2-135m-shape (270 MB of bfloat16, its
// embedding 14 chunks) written with GOMAXPROCS 4 and with 1 is the same file.
func TestPresetBF16BytesIndependentOfCores(t *testing.T) {
	prev := runtime.GOMAXPROCS(4)
	a := rssModel(t) // shared with the load tests; written now unless already written
	runtime.GOMAXPROCS(1)
	b := t.TempDir()
	err := WritePreset("smollm2-135m-shape", b)
	runtime.GOMAXPROCS(prev)
	if err != nil {
		t.Fatal(err)
	}
	if x, y := fileSHA256(t, filepath.Join(a, "model.safetensors")), fileSHA256(t, filepath.Join(b, "model.safetensors")); x != y {
		t.Fatalf("GOMAXPROCS 4 wrote %s, GOMAXPROCS 1 wrote %s", x, y)
	}
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
