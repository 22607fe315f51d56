// Package layers_test enforces the import rules of docs/architecture.md on the module's
// non-test imports, with `go list -deps`: the layer order (imports only point down) and
// the rules that keep the house livable. A failure names the offending import and, for a
// dependency that arrives indirectly, the chain that brings it in.
//
// A new package needs a line in layers below (and in docs/architecture.md); a rule that
// does not hold yet is marked pending, reported, and not failed on.
package layers_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

const mod = "github.com/tuft-go/tuft"

// layers ranks every package of the module (path relative to the module, a trailing /...
// covering a subtree): a package may import module packages of a lower rank, or inside
// its own subtree. Keep in step with the layer list in docs/architecture.md.
var layers = []struct {
	path string
	rank int
}{
	{"cmd/tuft", 100},
	{"cmd/tuft-bench", 100}, // the benchmarks, out of the product binary
	{"examples/...", 100},
	{"examples/internal/exenv", 99},
	{"internal/testenv", 95},      // test helper: starts servers in process
	{"internal/testenv/check", 1}, // test kit leaf (goldens, Eventually): stdlib only, so any package's tests may use it
	{"internal/cli", 1},           // the commands' flag kit (cmd/tuft, cmd/tuft-bench): stdlib only
	{"server", 90},                // the API process's composition root
	{"worker", 90},                // the worker process's composition root and gRPC service
	{"console", 85},               // the web console at /console: pages over the API's handler
	{"api", 80},
	{"api/openai", 79},    // OpenAI-compatible routes
	{"api/anthropic", 79}, // Anthropic-compatible routes
	{"api/textgen", 78},   // text generation shared by the compatible routes
	{"client", 75},        // the public Go SDK
	{"service", 70},
	{"futures", 60},
	{"registry", 60},
	{"backend", 50},
	{"backend/sched", 47},    // each hosted model's scheduler: KV manager, tenant policy, the loop
	{"backend/workerpb", 45}, // the gRPC schema: a leaf shared by backend (Remote) and worker
	{"api/wire", 40},
	{"api/wire/tinkerpb", 39},
	{"engine/export", 35}, // weights out: PEFT, merged HF, GGUF, Modelfile (reads engine models)
	{"engine", 34},
	{"engine/chat", 33},
	{"engine/tokenizer", 33},
	{"engine/safetensors", 33},
	{"engine/gguf", 33},              // GGUF files (llama.cpp): reader here, writer for exports
	{"engine/cuda", 32},              // the CUDA device (driver and cuBLAS through purego)
	{"engine/device/devicetest", 32}, // conformance suite for devices
	{"engine/device", 31},            // the device interface and the CPU device
	{"engine/kern", 30},
	{"store/persistence", 26},
	{"store/logstore", 24},
	{"store/memory", 24},
	{"store/redis", 24},
	{"store/storetest", 24},
	{"store", 20},
	{"telemetry/setup", 16},
	{"telemetry/httpserver", 15},
	{"telemetry/otlptrace", 14},
	{"config", 12},
	{"telemetry", 10},
}

// The rules besides the layer order. Each names what it protects.
var rules = []struct {
	name string
	// pkgs are the packages the rule applies to (relative, /... for a subtree).
	pkgs []string
	// forbidden are import paths (absolute, or relative to the module; a trailing /...
	// covers a subtree) that must not be reached.
	forbidden []string
	// direct: only the packages' own imports count; otherwise all their dependencies.
	direct bool
	// except are packages the rule does not apply to.
	except []string
	// pending, when set, says why the rule does not hold yet: it is reported, not failed.
	pending string
}{
	{name: "engine is a library: it imports nothing of the module above it, no HTTP, no telemetry, no gRPC",
		pkgs: []string{"engine/..."}, forbidden: []string{"api/...", "backend/...", "client/...", "config", "futures", "registry",
			"server", "service", "store/...", "telemetry/...", "worker/...", "net/http", "google.golang.org/grpc", "go.opentelemetry.io/..."}},
	{name: "only service, futures and registry (and the composition roots) touch store",
		pkgs: []string{"..."}, forbidden: []string{"store/..."}, direct: true,
		except: []string{"service", "futures", "registry", "server", "cmd/tuft", "store/...", "internal/testenv"}},
	{name: "config and the light telemetry package pull in no exporter, SDK, gRPC, Prometheus or gopsutil",
		pkgs: []string{"config", "telemetry"}, forbidden: []string{"google.golang.org/grpc", "go.opentelemetry.io/otel/exporters/...",
			"go.opentelemetry.io/otel/sdk/...", "github.com/prometheus/...", "github.com/shirou/gopsutil/...",
			"telemetry/setup", "telemetry/otlptrace", "telemetry/httpserver"}},
	{name: "the telemetry wiring is for the composition roots: only cmd/tuft imports telemetry/setup and telemetry/otlptrace",
		pkgs: []string{"..."}, forbidden: []string{"telemetry/setup", "telemetry/otlptrace"}, direct: true,
		except: []string{"cmd/tuft", "telemetry/...", "internal/testenv"}},
	{name: "the worker process touches neither the store nor the API side (discovery belongs to the API side)",
		pkgs: []string{"worker/..."}, forbidden: []string{"store/...", "server", "api/...", "service", "futures", "registry"}},
	{name: "the server is a composition root: only cmd/tuft and the test helper import it",
		pkgs: []string{"..."}, forbidden: []string{"server"}, direct: true, except: []string{"cmd/tuft", "internal/testenv"}},
	{name: "only api, the console, the public client and the telemetry wiring know HTTP",
		pkgs: []string{"..."}, forbidden: []string{"net/http"}, direct: true,
		except: []string{"api/...", "console", "client", "server", "cmd/tuft", "telemetry/httpserver", "telemetry/setup", "telemetry/otlptrace",
			"internal/testenv", "examples/..."}},
	{name: "the test kit is for tests: no product package imports internal/testenv",
		pkgs: []string{"..."}, forbidden: []string{"internal/testenv/..."}, direct: true, except: []string{"internal/testenv/..."}},
	{name: "the public wire types and the client SDK do not depend on the engine",
		pkgs: []string{"api/wire/...", "client"}, forbidden: []string{"engine/..."}},
}

// graph is the module's non-test import graph with every dependency: package → imports.
type graph map[string][]string

func load(t *testing.T) (graph, []string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", "./...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	g := graph{}
	var own []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		g[f[0]] = f[1:]
		if rel, ok := relative(f[0]); ok && !strings.HasPrefix(rel, "tests/") {
			own = append(own, rel)
		}
	}
	sort.Strings(own)
	return g, own
}

// relative is p relative to the module, if it is the module's.
func relative(p string) (string, bool) {
	if p == mod {
		return "", true
	}
	rel, ok := strings.CutPrefix(p, mod+"/")
	return rel, ok
}

// matches reports whether path p (relative for the module's, else absolute) is pattern or
// inside a pattern ending in /... ("..." alone matches everything).
func matches(p, pattern string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

func matchesAny(p string, patterns []string) bool {
	return slices.ContainsFunc(patterns, func(pat string) bool { return matches(p, pat) })
}

// name is p as the rules spell it: relative for the module's packages.
func name(p string) string {
	if rel, ok := relative(p); ok {
		return rel
	}
	return p
}

func rank(t *testing.T, p string) int {
	t.Helper()
	best, n := -1, -1
	for _, l := range layers {
		if matches(p, l.path) && len(l.path) > n {
			best, n = l.rank, len(l.path)
		}
	}
	return best
}

// chain is the shortest import chain from pkg to a package matching one of forbidden,
// or nil.
func (g graph) chain(pkg string, forbidden []string, direct bool) []string {
	type node struct {
		p    string
		prev *node
	}
	seen := map[string]bool{pkg: true}
	queue := []*node{{p: pkg}}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		for _, imp := range g[n.p] {
			if seen[imp] {
				continue
			}
			seen[imp] = true
			next := &node{p: imp, prev: n}
			if matchesAny(name(imp), forbidden) {
				var c []string
				for x := next; x != nil; x = x.prev {
					c = append([]string{name(x.p)}, c...)
				}
				return c
			}
			if !direct {
				queue = append(queue, next)
			}
		}
	}
	return nil
}

// Every package of the module has a layer, and its imports of the module's packages
// point down (or into its own subtree).
func TestImportsPointDown(t *testing.T) {
	g, own := load(t)
	for _, p := range own {
		r := rank(t, p)
		if r < 0 {
			t.Errorf("package %s has no layer: add it to docs/architecture.md and to the layers in %s", p, "tests/layers")
			continue
		}
		for _, imp := range g[mod+"/"+p] {
			q, ok := relative(imp)
			if !ok || strings.HasPrefix(q, p+"/") {
				continue
			}
			if rq := rank(t, q); rq >= r {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must point down", p, r, q, rq)
			}
		}
	}
}

func TestImportRules(t *testing.T) {
	g, own := load(t)
	for _, rule := range rules {
		var broken []string
		for _, p := range own {
			if !matchesAny(p, rule.pkgs) || matchesAny(p, rule.except) {
				continue
			}
			if c := g.chain(mod+"/"+p, rule.forbidden, rule.direct); c != nil {
				broken = append(broken, strings.Join(c, " → "))
			}
		}
		switch {
		case len(broken) == 0 && rule.pending != "":
			t.Errorf("pending rule %q holds now: drop its pending mark", rule.name)
		case len(broken) == 0:
		case rule.pending != "":
			t.Logf("pending rule %q (%s) is broken by:\n  %s", rule.name, rule.pending, strings.Join(broken, "\n  "))
		default:
			t.Errorf("rule %q is broken by:\n  %s", rule.name, strings.Join(broken, "\n  "))
		}
	}
}

// The matcher behaves as the rules assume.
func TestMatches(t *testing.T) {
	for _, tc := range []struct {
		p, pattern string
		want       bool
	}{
		{"store", "store/...", true}, {"store/redis", "store/...", true}, {"storex", "store/...", false},
		{"store/redis", "store", false}, {"anything", "...", true}, {"go.opentelemetry.io/otel/sdk/trace", "go.opentelemetry.io/otel/sdk/...", true},
	} {
		if got := matches(tc.p, tc.pattern); got != tc.want {
			t.Errorf("matches(%q, %q) = %v", tc.p, tc.pattern, got)
		}
	}
}

// A transitive violation is reported with the chain that brings it in.
func TestChainNamesTheWay(t *testing.T) {
	g := graph{mod + "/worker": {mod + "/backend", "fmt"}, mod + "/backend": {mod + "/store", "context"}, mod + "/store": {"context"}}
	if c := g.chain(mod+"/worker", []string{"store/..."}, false); strings.Join(c, " → ") != "worker → backend → store" {
		t.Fatalf("chain %v", c)
	}
	if c := g.chain(mod+"/worker", []string{"store/..."}, true); c != nil {
		t.Fatalf("direct imports only, got %v", c)
	}
}
