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
	{"reading the result encoder (h.enc): the service's future-making calls go through opRoute's operation.submit",
		func(n ast.Node) bool {
			s, ok := n.(*ast.SelectorExpr)
			return ok && s.Sel.Name == "enc" && isIdent(s.X, "h")
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
