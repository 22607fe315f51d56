package layers_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// modelLoopEntries are the engine's iteration-level entry points: a decode step, a
// training pass over a pack, a training job's datums and the KV pool a decode loop runs
// on. Whoever calls them runs a model loop; issue 24 gives each hosted model exactly one,
// its scheduler (backend/sched), so that every device operation goes through the loop that
// owns the model and a device error belongs to the unit that caused it. The engine's own
// single-request forms (Sample, ForwardBackward) stay open to tools and benchmarks.
var modelLoopEntries = map[string]bool{"DecodeStep": true, "TrainStep": true, "NewTrainJob": true, "NewKVPool": true}

// modelLoopOwners may call them: the engine (which defines them and builds Sample on
// them) and the scheduler.
var modelLoopOwners = []string{"engine/", "backend/sched/"}

// Only the scheduler drives a model's loop: a call of DecodeStep, TrainStep,
// NewTrainJob or NewKVPool in any other package's non-test Go file fails, naming it.
func TestModelLoopOnlyInScheduler(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("git rev-parse: %v (not a git checkout)", err)
	}
	root := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.go").Output()
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	parsed, sawScheduler := 0, false
	for _, name := range strings.Fields(string(out)) {
		if strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, "tests/") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, name), nil, 0)
		if err != nil {
			continue // deleted in the working tree, or not ours to parse
		}
		parsed++
		calls := modelLoopCalls(f)
		owned := false
		for _, p := range modelLoopOwners {
			owned = owned || strings.HasPrefix(name, p)
		}
		if owned {
			sawScheduler = sawScheduler || (strings.HasPrefix(name, "backend/sched/") && len(calls) > 0)
			continue
		}
		for _, c := range calls {
			found = append(found, name+": "+c)
		}
	}
	sort.Strings(found)
	for _, s := range found {
		t.Errorf("%s: a model loop outside backend/sched; submit the work to the model's scheduler (backend/sched: SubmitSample, SubmitForward, SubmitJob)", s)
	}
	if parsed == 0 {
		t.Fatal("no Go files found: the rule checked nothing")
	}
	if !sawScheduler {
		t.Fatal("backend/sched calls none of the entry points: the rule no longer tracks the code")
	}
}

// A rule that cannot fail proves nothing: the finder sees each entry point, called on a
// model or a field, and not the engine's single-request forms.
func TestModelLoopFinderSeesTheCalls(t *testing.T) {
	src := `package p
func f(m *engine.Model, h struct{ model *engine.Model }) {
	for {
		m.DecodeStep(ctx, nil)
	}
	h.model.TrainStep(ctx, nil)
	j, _ := m.NewTrainJob(a, req)
	p, _ := h.model.NewKVPool(8)
	m.Sample(ctx, nil, req)
	m.ForwardBackward(ctx, a, req)
	m.SampleWithHooks(ctx, nil, req, h)
}`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "m.DecodeStep,h.model.TrainStep,m.NewTrainJob,h.model.NewKVPool"
	if got := strings.Join(modelLoopCalls(f), ","); got != want {
		t.Fatalf("modelLoopCalls =\n %s\nwant\n %s", got, want)
	}
}

// modelLoopCalls lists, in source order, f's calls of a method of modelLoopEntries.
func modelLoopCalls(f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if s, ok := c.Fun.(*ast.SelectorExpr); ok && modelLoopEntries[s.Sel.Name] {
				out = append(out, chain(s))
			}
		}
		return true
	})
	return out
}
