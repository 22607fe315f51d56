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

// Model work parks no goroutine per operation (issue 24): futures hands a runnable model
// operation to the executor (Task.Start) and is told when it is done (Completion), and
// tenant fairness is decided once, by the backend's token scheduler. parkedShapes finds
// the shapes that would bring a parked goroutine per operation back:
//
//   - in futures, a go statement outside the functions that start the Manager's fixed
//     goroutines (fixedGoroutines): a goroutine per submission, per operation or per
//     result;
//   - in futures, a wait (a channel receive, a select, a call of Wait or Sleep) in the
//     function that calls a task's Start, in a Completion method or in queueWork: what
//     an executor's callback or the dispatcher must never do;
//   - in service, a call of the backend's blocking model methods (ForwardBackward,
//     OptimStep, Sample, SampleStream) outside asyncShims, or a go statement inside a
//     futures.Task literal: a model operation's body must hand its work over and return.
//
// A dispatcher that waits for each operation through a helper is not a shape this can
// see: futures' TestQueuedModelOperationsHoldNoGoroutines counts the goroutines instead.

// fixedGoroutines are the futures functions that may start goroutines: a fixed set at
// New (startGoroutines), and Shutdown's one waiter.
var fixedGoroutines = map[string]bool{"startGoroutines": true, "Shutdown": true}

// blockingModelCalls are the backend's blocking model methods.
var blockingModelCalls = map[string]bool{"ForwardBackward": true, "OptimStep": true, "Sample": true, "SampleStream": true}

// asyncShims is the service file that stands in for the backend's Async form of a
// streamed sample until backend.Backend has one (SampleStreamAsync).
const asyncShims = "service/backendasync.go"

func TestNoParkedGoroutinePerOperation(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("git rev-parse: %v (not a git checkout)", err)
	}
	root := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "--cached", "--others", "--exclude-standard", "--", "futures/*.go", "service/*.go").Output()
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	checked := 0
	for _, name := range strings.Fields(string(out)) {
		if strings.HasSuffix(name, "_test.go") || strings.Count(name, "/") != 1 {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, name), nil, 0)
		if err != nil {
			continue // deleted in the working tree
		}
		checked++
		for _, what := range parkedShapes(strings.Split(name, "/")[0], name, f) {
			found = append(found, name+": "+what)
		}
	}
	sort.Strings(found)
	for _, s := range found {
		t.Errorf("%s: a parked goroutine per operation; hand model work to the executor (futures.Task.Start, the backend's Async methods) and finish on a completion step", s)
	}
	if checked == 0 {
		t.Fatal("no Go files found: the rule checked nothing")
	}
}

// A rule that cannot fail proves nothing: the finder must see each shape it forbids, and
// not what the code does today.
func TestParkedShapeFinderSeesTheShapes(t *testing.T) {
	futuresSrc := `package futures
func (m *Manager) Submit(t Task) {
	go func() { m.run(t) }()
}
func (m *Manager) start(c *Completion) {
	done := make(chan struct{})
	c.e.task.Start(c.ctx, c)
	<-done
}
func (c *Completion) Done(res Result, err error) {
	c.m.wg.Wait()
}
func (m *Manager) queueWork(f func()) {
	select {
	case m.work <- f:
	}
}
func (m *Manager) startGoroutines() {
	go m.janitor()
}
func (m *Manager) blockingWorker() {
	m.cond.Wait()
	e.task.Run(ctx)
}`
	serviceSrc := `package service
func (s *Service) ForwardBackward() {
	s.submit(ctx, futures.Task{Start: func(ctx context.Context, c *futures.Completion) {
		go func() { c.Done(s.be.ForwardBackward(ctx, m, l, req)) }()
	}})
	res, err := s.be.Sample(ctx, m, l, req)
	s.sampleAsync(ctx, m, l, req, done)
	_ = s.be.SaveState(ctx, m, l, dir, true)
}`
	for _, c := range []struct{ pkg, src, want string }{
		{"futures", futuresSrc, "go statement in Submit,wait in start,wait in Done,wait in queueWork"},
		{"service", serviceSrc, "go statement in a futures.Task literal,blocking s.be.ForwardBackward,blocking s.be.Sample"},
	} {
		f, err := parser.ParseFile(token.NewFileSet(), c.pkg+"/p.go", c.src, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(parkedShapes(c.pkg, c.pkg+"/p.go", f), ","); got != c.want {
			t.Errorf("%s: parkedShapes =\n %s\nwant\n %s", c.pkg, got, c.want)
		}
	}
	f, _ := parser.ParseFile(token.NewFileSet(), asyncShims, serviceSrc, 0)
	if got := parkedShapes("service", asyncShims, f); len(got) != 1 || got[0] != "go statement in a futures.Task literal" {
		t.Errorf("the shims file may call the blocking methods, nothing more: %v", got)
	}
}

// The rule tracks the real code: futures starts its goroutines and calls Start where the
// rule looks, so a rename cannot leave it checking nothing.
func TestParkedRuleSeesTheRealCode(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("git rev-parse: %v (not a git checkout)", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(top)), "futures")
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	goIn, startIn := map[string]bool{}, map[string]bool{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch v := n.(type) {
				case *ast.GoStmt:
					goIn[fd.Name.Name] = true
				case *ast.CallExpr:
					if callsTaskStart(v) {
						startIn[fd.Name.Name] = true
					}
				}
				return true
			})
		}
	}
	if !goIn["startGoroutines"] {
		t.Error("futures starts no goroutine in startGoroutines: update fixedGoroutines with the code")
	}
	if !startIn["start"] {
		t.Errorf("futures calls a task's Start in %v, not in start: update the rule with the code", startIn)
	}
}

// parkedShapes lists, in source order, the shapes of a parked goroutine per operation in
// f, a non-test file of package pkg (futures or service) named name.
func parkedShapes(pkg, name string, f *ast.File) []string {
	var out []string
	switch pkg {
	case "futures":
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			fn := fd.Name.Name
			nonBlocking := fn == "queueWork" || receiverIs(fd, "Completion")
			waits := false
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch v := n.(type) {
				case *ast.GoStmt:
					if !fixedGoroutines[fn] {
						out = append(out, "go statement in "+fn)
					}
				case *ast.CallExpr:
					if callsTaskStart(v) {
						nonBlocking = true
					}
					if s, ok := v.Fun.(*ast.SelectorExpr); ok && (s.Sel.Name == "Wait" || s.Sel.Name == "Sleep") {
						waits = true
					}
				case *ast.UnaryExpr:
					if v.Op == token.ARROW {
						waits = true
					}
				case *ast.SelectStmt:
					waits = true
				case *ast.FuncLit:
					// A continuation queued from here runs elsewhere (a completion worker);
					// its body is not this function's.
					return false
				}
				return true
			})
			if nonBlocking && waits {
				out = append(out, "wait in "+fn)
			}
		}
	case "service":
		ast.Inspect(f, func(n ast.Node) bool {
			switch v := n.(type) {
			case *ast.CompositeLit:
				if isSel(v.Type, "futures", "Task") {
					ast.Inspect(v, func(n ast.Node) bool {
						if _, ok := n.(*ast.GoStmt); ok {
							out = append(out, "go statement in a futures.Task literal")
						}
						return true
					})
				}
			case *ast.CallExpr:
				s, ok := v.Fun.(*ast.SelectorExpr)
				if !ok || !blockingModelCalls[s.Sel.Name] || name == asyncShims {
					break
				}
				if x, ok := s.X.(*ast.SelectorExpr); ok && x.Sel.Name == "be" {
					out = append(out, "blocking s.be."+s.Sel.Name)
				}
			}
			return true
		})
	}
	return out
}

// callsTaskStart reports whether c calls a task's Start (x.task.Start(...) or
// task.Start(...)).
func callsTaskStart(c *ast.CallExpr) bool {
	s, ok := c.Fun.(*ast.SelectorExpr)
	if !ok || s.Sel.Name != "Start" {
		return false
	}
	switch x := s.X.(type) {
	case *ast.SelectorExpr:
		return x.Sel.Name == "task"
	case *ast.Ident:
		return x.Name == "task" || x.Name == "t"
	}
	return false
}

// receiverIs reports whether fd is a method of type name (or a pointer to it).
func receiverIs(fd *ast.FuncDecl, name string) bool {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return false
	}
	t := fd.Recv.List[0].Type
	if st, ok := t.(*ast.StarExpr); ok {
		t = st.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.Name == name
}
