package layers_test

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// A controller of service (a type named *Ctl, or the table they embed) keeps its state to
// itself (issue 24): its fields are selected in the file that declares the type and
// nowhere else, so the rest of the service reaches records through the controller's
// methods (get, put, del, ofTenant…) and never as s.runs.m[id]. The one exception is the
// lock family (the file declaring lockSet), which takes the controllers' mu fields in
// their documented order.
func TestControllersKeepTheirState(t *testing.T) {
	found := controllerFieldUses(t, "../../service", nil)
	for _, f := range found {
		t.Error(f)
	}
}

// The finder sees a plant: a file outside a controller's own that indexes its map.
func TestControllerRuleSeesAPlant(t *testing.T) {
	plant := `package service

func (s *Service) plantedPeek(id string) *Run { return s.runs.recs[id] }
`
	found := controllerFieldUses(t, "../../service", map[string]string{"zz_plant.go": plant})
	var planted []string
	for _, f := range found {
		if strings.HasPrefix(f, "zz_plant.go:") {
			planted = append(planted, f)
		}
	}
	if len(planted) != 1 || !strings.Contains(planted[0], "table.recs") {
		t.Fatalf("the plant was not found exactly once: %q", planted)
	}
}

// controllerFieldUses type-checks the non-test files of dir (with extra files added) and
// lists every selection of a controller's field outside the controller's own file.
func controllerFieldUses(t *testing.T, dir string, extra map[string]string) []string {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	for n, src := range extra {
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), src, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}, Defs: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: exportImporter(t, fset, dir)}
	if _, err := conf.Check("service", fset, files, info); err != nil {
		t.Fatalf("type-check service: %v", err)
	}
	// The controllers: their declaring files, and the file of the lock family.
	own := map[*types.TypeName]string{}
	family := ""
	for id, obj := range info.Defs {
		tn, ok := obj.(*types.TypeName)
		if !ok || tn.Parent() != tn.Pkg().Scope() {
			continue
		}
		if _, isStruct := tn.Type().Underlying().(*types.Struct); isStruct && (strings.HasSuffix(tn.Name(), "Ctl") || tn.Name() == "table") {
			own[tn] = fset.Position(id.Pos()).Filename
		}
		if tn.Name() == "lockSet" {
			family = fset.Position(id.Pos()).Filename
		}
	}
	if len(own) < 4 || family == "" {
		t.Fatalf("found %d controllers and lock family %q: the rule has lost its targets", len(own), family)
	}
	var found []string
	for sel, s := range info.Selections {
		if s.Kind() != types.FieldVal {
			continue
		}
		v := s.Obj().(*types.Var)
		holder := fieldHolder(s.Recv(), s.Index())
		if holder == nil {
			continue
		}
		decl, ok := own[holder]
		if !ok {
			continue
		}
		at := fset.Position(sel.Sel.Pos())
		if at.Filename == decl || (v.Name() == "mu" && at.Filename == family) {
			continue
		}
		found = append(found, filepath.Base(at.Filename)+":"+itoa(at.Line)+": "+holder.Name()+"."+v.Name()+
			" is the controller's own state (declared in "+filepath.Base(decl)+"): give "+holder.Name()+" a method for it")
	}
	sort.Strings(found)
	return found
}

// fieldHolder is the named type whose struct declares the field a selection reaches
// (through embedded fields: index is the path).
func fieldHolder(recv types.Type, index []int) *types.TypeName {
	var holder *types.TypeName
	t := recv
	for _, i := range index {
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		n, ok := t.(*types.Named)
		if !ok {
			return nil
		}
		holder = n.Origin().Obj()
		st, ok := n.Underlying().(*types.Struct)
		if !ok {
			return nil
		}
		t = st.Field(i).Type()
	}
	return holder
}

func itoa(n int) string {
	var b []byte
	for n >= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(append([]byte{byte('0' + n)}, b...))
}

// exportImporter reads the dependencies of dir's package from the build's export data
// (go list -export), so the check needs no source of theirs.
func exportImporter(t *testing.T, fset *token.FileSet, dir string) types.Importer {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.String())
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if p, file, ok := strings.Cut(sc.Text(), "\t"); ok && file != "" {
			exports[p] = file
		}
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, os.ErrNotExist
		}
		return os.Open(f)
	})
}
