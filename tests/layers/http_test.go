package layers_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// httpRules keep the shape of the HTTP face (docs/architecture.md, "The HTTP layers"):
// each concern in one place, every dialect through it. A rule names the one function
// (file:func) allowed to do a thing; anywhere else in api/... is a failure.
var httpRules = []struct {
	what  string
	match func(n ast.Node) bool
	only  string // "file.go:func", the file relative to the repository root
}{
	{"calling an operation's submit (op.submit): the service's future-making calls go through opRoute",
		func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			return ok && isSel(c.Fun, "op", "submit")
		},
		"api/ops.go:opRoute"},
	{"building the future reply (wire.UntypedAPIFuture)",
		func(n ast.Node) bool {
			c, ok := n.(*ast.CompositeLit)
			return ok && isSel(c.Type, "wire", "UntypedAPIFuture")
		},
		"api/ops.go:opRoute"},
	{"reading an API key header (X-API-Key, Authorization)",
		func(n ast.Node) bool {
			c, ok := n.(*ast.CallExpr)
			if !ok || len(c.Args) != 1 {
				return false
			}
			f, ok := c.Fun.(*ast.SelectorExpr)
			if !ok || f.Sel.Name != "Get" {
				return false
			}
			v, _ := strconv.Unquote(basicLit(c.Args[0]))
			return strings.EqualFold(v, "X-API-Key") || strings.EqualFold(v, "Authorization")
		},
		"api/layers.go:requestKey"},
	{"relaying a request to another replica (relay)",
		func(n ast.Node) bool { c, ok := n.(*ast.CallExpr); return ok && isSel(c.Fun, "h", "relay") },
		"api/forward.go:forwardLayer"},
	{"declaring a JSON writer (writeJSON)",
		func(n ast.Node) bool {
			d, ok := n.(*ast.FuncDecl)
			return ok && strings.EqualFold(d.Name.Name, "writeJSON")
		},
		"api/textgen/http.go:WriteJSON"},
}

func TestHTTPConcernsHaveOnePlace(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(filepath.Join(root, "api"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			where := rel + ":" + fn.Name.Name
			ast.Inspect(fn, func(n ast.Node) bool {
				for _, r := range httpRules {
					if n != nil && r.match(n) && where != r.only {
						t.Errorf("%s: %s belongs in %s only", where, r.what, r.only)
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The rules find what they look for: each matches in the one place it allows.
func TestHTTPRulesMatchTheirPlace(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, r := range httpRules {
		file, fn, _ := strings.Cut(r.only, ":")
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, file), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, d := range f.Decls {
			if d, ok := d.(*ast.FuncDecl); ok && d.Name.Name == fn {
				ast.Inspect(d, func(n ast.Node) bool {
					found = found || (n != nil && r.match(n))
					return !found
				})
			}
		}
		if !found {
			t.Errorf("%s: no match in %s, its one place (a rule that matches nothing guards nothing)", r.what, r.only)
		}
	}
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func isSel(e ast.Expr, x, sel string) bool {
	s, ok := e.(*ast.SelectorExpr)
	return ok && s.Sel.Name == sel && isIdent(s.X, x)
}

func basicLit(e ast.Expr) string {
	if b, ok := e.(*ast.BasicLit); ok && b.Kind == token.STRING {
		return b.Value
	}
	return ""
}

// The service's future-making methods are those an operation's submit calls (h.svc.X
// inside a function given as submit: the result encoder is wired into the service once,
// so the call itself no longer shows it makes a future). They are called nowhere else in
// api/..., so every future is answered by opRoute's reply.
func TestFutureCallsOnlyInSubmit(t *testing.T) {
	root := filepath.Join("..", "..")
	type call struct {
		where  string
		method string
	}
	var inSubmit, outside []call
	err := filepath.WalkDir(filepath.Join(root, "api"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		submits := map[*ast.FuncLit]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.KeyValueExpr: // operation{submit: func…}
				if isIdent(n.Key, "submit") {
					if fl, ok := n.Value.(*ast.FuncLit); ok {
						submits[fl] = true
					}
				}
			case *ast.AssignStmt: // o.submit = func…
				for i, l := range n.Lhs {
					if s, ok := l.(*ast.SelectorExpr); ok && s.Sel.Name == "submit" && i < len(n.Rhs) {
						if fl, ok := n.Rhs[i].(*ast.FuncLit); ok {
							submits[fl] = true
						}
					}
				}
			}
			return true
		})
		var walk func(n ast.Node, in bool)
		walk = func(n ast.Node, in bool) {
			ast.Inspect(n, func(m ast.Node) bool {
				if fl, ok := m.(*ast.FuncLit); ok && submits[fl] && !in {
					walk(fl.Body, true)
					return false
				}
				if c, ok := m.(*ast.CallExpr); ok {
					if s, ok := c.Fun.(*ast.SelectorExpr); ok && isSel(s.X, "h", "svc") {
						at := fset.Position(c.Pos())
						cl := call{filepath.Base(at.Filename) + ":" + strconv.Itoa(at.Line), s.Sel.Name}
						if in {
							inSubmit = append(inSubmit, cl)
						} else {
							outside = append(outside, cl)
						}
					}
				}
				return true
			})
		}
		walk(f, false)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	future := map[string]bool{}
	for _, c := range inSubmit {
		future[c.method] = true
	}
	if len(future) < 8 {
		t.Fatalf("found %d future-making service methods in submit functions (%v): the rule has lost its targets", len(future), future)
	}
	for _, c := range outside {
		if future[c.method] {
			t.Errorf("%s: h.svc.%s makes a future: call it from an operation's submit (api/ops.go opRoute answers the future)", c.where, c.method)
		}
	}
}
