package layers_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// sampleStreamBase is the PCG stream of a request's first sample (engine/generation.go):
// a second copy of it is a second copy of the seeding rule.
const sampleStreamBase = 0x9e3779b97f4a7c15

// generationOnly are the engine names that carry a rule of generation (stop strings, the
// prompt plan, the stop-reason decision): outside the engine only engine.Generation uses
// them. Reading a result's StopReason is fine; naming StopReasonStop to decide one is not.
var generationOnly = map[string]bool{
	"NewStopMatcher": true, "StopMatcher": true, "StopState": true,
	"NewPromptPlan": true, "PromptPlan": true,
	"StopReasonStop": true, "StopReasonLength": true,
}

// The sampling loop is written once, in engine.Generation (issue 24): whoever drives
// decode steps (backend's scheduler, or any package that calls DecodeStep) asks the
// Generation for draws and hands it the tokens, and never again defines the stop-token
// set, the seed streams, a draw, the stop reason or the prompt outputs. This finds the
// shapes that bring a copy back in backend and in every package that calls DecodeStep.
func TestGenerationRulesOnlyInEngine(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("git rev-parse: %v (not a git checkout)", err)
	}
	root := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.go").Output()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	drivers := map[string]bool{"backend": true}
	for _, name := range strings.Fields(string(out)) {
		if strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, "engine/") || strings.HasPrefix(name, "tests/") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, name), nil, 0)
		if err != nil {
			continue // deleted in the working tree, or not ours to parse
		}
		files[name] = f
		if callsDecodeStep(f) {
			drivers[path.Dir(name)] = true
		}
	}
	var found []string
	for name, f := range files {
		dir := path.Dir(name)
		if !drivers[dir] && !strings.HasPrefix(dir, "backend/") {
			continue
		}
		for _, what := range generationCopies(f) {
			found = append(found, name+": "+what)
		}
	}
	sort.Strings(found)
	for _, s := range found {
		t.Errorf("%s: a rule of generation outside engine.Generation; ask the Generation (Draws, Accept, PromptStep, ApplyPrompt) instead", s)
	}
	if len(files) == 0 {
		t.Fatal("no Go files found: the rule checked nothing")
	}
}

// A rule that cannot fail proves nothing: the finder must see each shape it forbids, and
// not the calls a scheduler makes today.
func TestGenerationCopyFinderSeesTheShapes(t *testing.T) {
	src := `package p
import (
	"math/rand/v2"
	"github.com/tuft-go/tuft/engine"
	"github.com/tuft-go/tuft/engine/tokenizer"
)
func drawFor(p engine.SampleParams, rng *rand.Rand) engine.Draw {
	d := engine.Draw{Temperature: p.Temperature}
	return d
}
func f(seed uint64, i int, tok engine.TextCodec, prompt []int32) {
	_ = rand.New(rand.NewPCG(seed, uint64(i)+0x9e3779b97f4a7c15))
	_ = engine.NewStopMatcher(nil)
	var r engine.StopReason = engine.StopReasonLength
	_ = r
	_ = tokenizer.NewStreamAfter(tok, prompt)
}
func allowed(g *engine.Generation, m *engine.Model, s engine.SampleResult) {
	_ = g.Draws(-1)
	_ = g.Accept(0, 1, 0, nil)
	_ = string(s.Sequences[0].StopReason)
	m.DecodeStep(nil, nil)
}`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "func drawFor,engine.Draw literal,rand.NewPCG,0x9e3779b97f4a7c15,engine.NewStopMatcher,engine.StopReasonLength,tokenizer.NewStreamAfter"
	if got := strings.Join(generationCopies(f), ","); got != want {
		t.Fatalf("generationCopies =\n %s\nwant\n %s", got, want)
	}
	if !callsDecodeStep(f) {
		t.Fatal("callsDecodeStep missed m.DecodeStep")
	}
}

// TestGenerationLivesInEngine checks the other side: the rules are where the finder
// allows them (engine/generation.go seeds the streams with the constant above), so the
// rule tracks the real code and not a name that moved away.
func TestGenerationLivesInEngine(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("git rev-parse: %v (not a git checkout)", err)
	}
	name := filepath.Join(strings.TrimSpace(string(top)), "engine", "generation.go")
	f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(generationCopies(f), ",")
	for _, w := range []string{"rand.NewPCG", "0x9e3779b97f4a7c15"} {
		if !strings.Contains(got, w) {
			t.Errorf("engine/generation.go no longer shows %s (found %q): update the rule with the code", w, got)
		}
	}
}

// callsDecodeStep reports whether f calls a method named DecodeStep (it drives decode
// steps, so it is a place a sampling loop could be written).
func callsDecodeStep(f *ast.File) bool {
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "DecodeStep" {
				found = true
			}
		}
		return !found
	})
	return found
}

// generationCopies lists, in source order, the shapes of a generation rule in f: a
// function named drawFor, an engine.Draw literal (building a draw), a call of NewPCG
// (seeding a stream), the first sample's stream constant, an engine name of
// generationOnly, and tokenizer.NewStreamAfter (the stop-string text).
func generationCopies(f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch v := n.(type) {
		case *ast.FuncDecl:
			if v.Name.Name == "drawFor" {
				out = append(out, "func drawFor")
			}
		case *ast.CompositeLit:
			if chain(v.Type) == "engine.Draw" {
				out = append(out, "engine.Draw literal")
			}
		case *ast.SelectorExpr:
			switch c := chain(v); {
			case v.Sel.Name == "NewPCG":
				out = append(out, c)
			case strings.HasPrefix(c, "engine.") && generationOnly[v.Sel.Name]:
				out = append(out, c)
			case c == "tokenizer.NewStreamAfter":
				out = append(out, c)
			}
		case *ast.BasicLit:
			if v.Kind == token.INT {
				if x, err := strconv.ParseUint(v.Value, 0, 64); err == nil && x == sampleStreamBase {
					out = append(out, v.Value)
				}
			}
		}
		return true
	})
	return out
}
