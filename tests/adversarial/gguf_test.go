package adversarial

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tuft-go/tuft/internal/testenv"
)

// hostileGGUF is a GGUF header whose counts or lengths claim far more than the file holds.
func hostileGGUF(tensors, kvs uint64, rest ...[]byte) []byte {
	b := []byte("GGUF")
	b = binary.LittleEndian.AppendUint32(b, 3)
	b = binary.LittleEndian.AppendUint64(b, tensors)
	b = binary.LittleEndian.AppendUint64(b, kvs)
	for _, r := range rest {
		b = append(b, r...)
	}
	return append(b, make([]byte, 256)...)
}

func ggufString(s string) []byte {
	return append(binary.LittleEndian.AppendUint64(nil, uint64(len(s))), s...)
}

// TestHostileGGUFModelFiles: a model path naming a GGUF file whose header claims
// terabytes (tensor or metadata counts, a string or array length) or that is cut short
// stops `tuft launch` at once with an error naming what is wrong, and `tuft model import`
// leaves no directory behind: nothing is allocated from a count before it is checked
// against the file's size.
func TestHostileGGUFModelFiles(t *testing.T) {
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	cases := []struct {
		name, want string
		data       []byte
	}{
		{"tensor count", "tensor_count", hostileGGUF(1<<62, 0)},
		{"metadata count", "metadata_kv_count", hostileGGUF(0, 1<<62)},
		{"key length", "metadata entry 0", hostileGGUF(0, 1, u64(1<<62))},
		{"array length", `metadata key "tokenizer.ggml.tokens": array length`, hostileGGUF(0, 1,
			ggufString("tokenizer.ggml.tokens"), u32(9), u32(8), u64(1<<61))},
		{"tensor dims", `tensor 0 ("token_embd.weight")`, hostileGGUF(1, 0, ggufString("token_embd.weight"), u32(2), u64(1<<40), u64(1<<40))},
		{"no architecture", `"general.architecture" is missing`, hostileGGUF(0, 0)},
		{"truncated", "magic: 4 bytes needed at offset 0, the file has 3: truncated", []byte("GGU")},
		{"not gguf", "not a GGUF file", []byte("GGML and more bytes")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			home := t.TempDir()
			path := filepath.Join(home, "hostile.gguf")
			if err := os.WriteFile(path, c.data, 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := strings.Replace(configYAML(t, testenv.FreePort(t), "", ""), "path: "+testenv.TinyDir(t), "path: "+path, 1)
			p, ok := launch(t, home, cfg)
			if ok {
				t.Fatal("tuft launch served a hostile GGUF file")
			}
			if log := p.logText(); !strings.Contains(log, c.want) || !strings.Contains(log, "models[0]") {
				t.Fatalf("the log does not name %q for models[0]:\n%s", c.want, log)
			}
			out := filepath.Join(home, "imported")
			msg, err := exec.Command(tuftBin(t), "model", "import", "--out", out, path).CombinedOutput()
			if err == nil || !strings.Contains(string(msg), c.want) {
				t.Fatalf("tuft model import: %v\n%s", err, msg)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Fatalf("import left %s behind (%v)", out, err)
			}
		})
	}
}
