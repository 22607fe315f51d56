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

// notConfigKeys are the zero-fills that stay: each is a number no configuration key
// holds (an internal interval or a test convenience), with why.
var notConfigKeys = map[string]string{
	"api/handler.go:o.ArchiveTTL":           "archive links' lifetime: an internal constant, not an operator's setting",
	"backend/discovery.go:o.FailuresToDrop": "failed checks before a worker is dropped: internal, set by tests",
	"backend/remote.go:o.ConnectTimeout":    "the first Info call's bound: internal, set by tests",
	"engine/lora.go:cfg.Alpha": "the engine is a library (no config): alpha = rank for a caller that names none; the server always passes " +
		"models[].lora_alpha_ratio × rank (service/training.go)",
	"futures/futures.go:o.KeepInMemory":        "how long a resolved future stays in memory: an internal cache bound",
	"client/service.go:lo.Rank":                "the client SDK's LoRA rank when a caller names none (the Tinker SDK's), not the server's",
	"service/sampling.go:req.Params.MaxTokens": "a sample request's max_tokens when the wire omits it (Tinker's default): a request default, not a limit",
}

// Config is the one source of numbers: a constructor takes each from its caller, which
// takes it from config.Default() and the file, and never fills a zero with a default of
// its own (CONTRIBUTING.md, "Add a config key"). The shape that reintroduces one is
// `if o.X <= 0 { o.X = <a number or constant> }` (or == 0, or < 1): this finds it outside config.
func TestNoSecondDefaultsOutsideConfig(t *testing.T) {
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
	for _, name := range strings.Fields(string(out)) {
		if strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, "config/") || strings.HasPrefix(name, "tests/") ||
			strings.HasPrefix(name, "examples/") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, filepath.Join(root, name), nil, 0)
		if err != nil {
			continue // deleted in the working tree, or not ours to parse
		}
		for _, field := range zeroFills(f) {
			key := name + ":" + field
			if _, ok := notConfigKeys[key]; !ok {
				found = append(found, key)
			}
		}
	}
	sort.Strings(found)
	for _, k := range found {
		t.Errorf("%s fills a zero with its own number: take it from the configuration (a key in config.Default(), "+
			"passed by the caller; config.MustPositive to refuse a zero), or, if no key holds it, list it in notConfigKeys with why", k)
	}
}

// A rule that cannot fail proves nothing: the finder must see the shape it forbids.
func TestZeroFillFinderSeesTheShape(t *testing.T) {
	src := `package p
import "time"
func f(o *struct{ TTL time.Duration; N int; Name string }) {
	if o.TTL <= 0 {
		o.TTL = 24 * time.Hour
	}
	if o.N == 0 {
		o.N = defaultN
	}
	if o.Name == "" {
		o.Name = "x"
	}
}`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(zeroFills(f), ","); got != "o.TTL,o.N" {
		t.Fatalf("zeroFills = %q, want o.TTL,o.N", got)
	}
}

// zeroFills lists the selectors x.F of `if x.F <= 0 { x.F = <anything> }` (also == 0,
// < 1) in f: comparing with the number 0 makes x.F a number, so whatever the body
// assigns (a literal, time.Hour, a named constant) is a default of its own.
func zeroFills(f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		is, ok := n.(*ast.IfStmt)
		if !ok || is.Init != nil || len(is.Body.List) != 1 {
			return true
		}
		cond, ok := is.Cond.(*ast.BinaryExpr)
		if !ok {
			return true
		}
		lit, ok := cond.Y.(*ast.BasicLit)
		if !ok || lit.Kind != token.INT && lit.Kind != token.FLOAT {
			return true
		}
		zeroTest := (cond.Op == token.LEQ || cond.Op == token.EQL) && lit.Value == "0" || cond.Op == token.LSS && lit.Value == "1"
		x, ok := cond.X.(*ast.SelectorExpr)
		if !zeroTest || !ok {
			return true
		}
		as, ok := is.Body.List[0].(*ast.AssignStmt)
		if !ok || len(as.Lhs) != 1 || as.Tok != token.ASSIGN || chain(as.Lhs[0]) != chain(x) {
			return true
		}
		out = append(out, chain(x))
		return true
	})
	return out
}

// chain renders a selector chain (o.Limits.Max) for comparison and messages.
func chain(e ast.Expr) string {
	switch v := e.(type) {
	case *ast.Ident:
		return v.Name
	case *ast.SelectorExpr:
		return chain(v.X) + "." + v.Sel.Name
	}
	return "?"
}
