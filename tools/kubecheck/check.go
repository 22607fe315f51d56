package main

import (
	"fmt"
	"os"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
)

// Finding is one problem, located by file, document (1-based, within the file) and field.
type Finding struct {
	File   string // base name of the manifest file
	Doc    int    // 1-based document index; 0 for the file as a whole
	Line   int    // line where the document starts; 0 when unknown
	Object string // "Kind name" when known
	Field  string // field path, e.g. spec.template.spec.containers[0].readinessProbe
	Msg    string
}

func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(f.File)
	if f.Line > 0 {
		fmt.Fprintf(&b, ":%d", f.Line)
	}
	if f.Doc > 0 {
		fmt.Fprintf(&b, ": document %d", f.Doc)
	}
	if f.Object != "" {
		fmt.Fprintf(&b, " (%s)", f.Object)
	}
	if f.Field != "" {
		fmt.Fprintf(&b, ": %s", f.Field)
	}
	fmt.Fprintf(&b, ": %s", f.Msg)
	return b.String()
}

// Object is one decoded manifest document.
type Object struct {
	File string
	Doc  int
	Line int
	GVK  schema.GroupVersionKind
	Obj  runtime.Object
	Meta metav1.Object
	NS   string // effective namespace (kustomization namespace, else metadata.namespace, else "default")
}

func (o *Object) desc() string { return o.GVK.Kind + " " + o.Meta.GetName() }

// Result is what Check found: the decoded objects and the problems.
type Result struct {
	Objects  []*Object
	Findings []Finding
}

func (r *Result) add(o *Object, field, format string, args ...any) {
	r.Findings = append(r.Findings, Finding{File: o.File, Doc: o.Doc, Line: o.Line, Object: o.desc(), Field: field, Msg: fmt.Sprintf(format, args...)})
}

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, batchv1.AddToScheme, policyv1.AddToScheme,
		networkingv1.AddToScheme, autoscalingv2.AddToScheme, rbacv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// strictDecoder decodes YAML into the typed object registered for its apiVersion/kind,
// rejecting unknown and duplicate fields and values of the wrong type. It applies no
// defaults, so a missing field stays missing for the semantic checks.
var strictDecoder = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme,
	kjson.SerializerOptions{Yaml: true, Strict: true})

var kustomizationNames = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

func isManifest(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

// Check validates every manifest in dir (not recursive) and its kustomization.
func Check(dir string) (*Result, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	r := &Result{}
	var files []string
	var kfile string
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		n := e.Name()
		isK := false
		for _, k := range kustomizationNames {
			if n == k {
				isK = true
			}
		}
		switch {
		case isK:
			kfile = n
		case isManifest(n):
			files = append(files, n)
		}
	}
	sort.Strings(files)

	var kust *Kustomization
	if kfile == "" {
		r.Findings = append(r.Findings, Finding{File: "kustomization.yaml", Msg: "missing (expected in " + dir + ")"})
	} else {
		kust = checkKustomization(r, dir, kfile, files)
	}
	for _, f := range files {
		if err := decodeFile(r, dir, f, kust); err != nil {
			return nil, err
		}
	}
	semantic(r, kust)
	return r, nil
}
