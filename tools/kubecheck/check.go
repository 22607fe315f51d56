package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
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

// Kustomization is the subset of kustomize.config.k8s.io/v1beta1 Kustomization this
// checker understands; any other field is reported (strict decoding).
type Kustomization struct {
	APIVersion         string            `json:"apiVersion"`
	Kind               string            `json:"kind"`
	Namespace          string            `json:"namespace,omitempty"`
	NamePrefix         string            `json:"namePrefix,omitempty"`
	NameSuffix         string            `json:"nameSuffix,omitempty"`
	Resources          []string          `json:"resources,omitempty"`
	Components         []string          `json:"components,omitempty"`
	Labels             []any             `json:"labels,omitempty"`
	CommonLabels       map[string]string `json:"commonLabels,omitempty"`
	CommonAnnotations  map[string]string `json:"commonAnnotations,omitempty"`
	Images             []KustomizeImage  `json:"images,omitempty"`
	Patches            []any             `json:"patches,omitempty"`
	ConfigMapGenerator []Generator       `json:"configMapGenerator,omitempty"`
	SecretGenerator    []Generator       `json:"secretGenerator,omitempty"`
	GeneratorOptions   map[string]any    `json:"generatorOptions,omitempty"`
}

// KustomizeImage is an images: entry.
type KustomizeImage struct {
	Name    string `json:"name"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

// Generator is a configMapGenerator / secretGenerator entry.
type Generator struct {
	Name      string         `json:"name"`
	Namespace string         `json:"namespace,omitempty"`
	Behavior  string         `json:"behavior,omitempty"`
	Files     []string       `json:"files,omitempty"`
	Literals  []string       `json:"literals,omitempty"`
	Envs      []string       `json:"envs,omitempty"`
	Type      string         `json:"type,omitempty"`
	Options   map[string]any `json:"options,omitempty"`
}

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

func checkKustomization(r *Result, dir, kfile string, files []string) *Kustomization {
	data, err := os.ReadFile(filepath.Join(dir, kfile))
	if err != nil {
		r.Findings = append(r.Findings, Finding{File: kfile, Msg: err.Error()})
		return nil
	}
	var k Kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		r.Findings = append(r.Findings, Finding{File: kfile, Doc: 1, Msg: "strict decoding: " + err.Error()})
		// Still use what decoded leniently, so the other checks can run.
		k = Kustomization{}
		if err := yaml.Unmarshal(data, &k); err != nil {
			return nil
		}
	}
	if k.Kind != "Kustomization" {
		r.Findings = append(r.Findings, Finding{File: kfile, Doc: 1, Field: "kind", Msg: fmt.Sprintf("%q, want Kustomization", k.Kind)})
	}
	if !strings.HasPrefix(k.APIVersion, "kustomize.config.k8s.io/") {
		r.Findings = append(r.Findings, Finding{File: kfile, Doc: 1, Field: "apiVersion", Msg: fmt.Sprintf("%q, want kustomize.config.k8s.io/v1beta1", k.APIVersion)})
	}
	listed := map[string]bool{}
	for i, res := range k.Resources {
		res = filepath.Clean(res)
		listed[res] = true
		if strings.Contains(res, "://") || strings.HasPrefix(res, "github.com/") {
			continue // remote resource
		}
		if _, err := os.Stat(filepath.Join(dir, res)); err != nil {
			r.Findings = append(r.Findings, Finding{File: kfile, Doc: 1, Field: fmt.Sprintf("resources[%d]", i), Msg: fmt.Sprintf("%q does not exist", res)})
		}
	}
	for _, f := range files {
		if !listed[f] {
			r.Findings = append(r.Findings, Finding{File: kfile, Doc: 1, Field: "resources", Msg: fmt.Sprintf("does not list %s", f)})
		}
	}
	return &k
}

// document is one YAML document of a file and the line it starts on.
type document struct {
	line int
	data []byte
}

// splitDocuments splits a multi-document YAML stream at "---" separator lines.
func splitDocuments(data []byte) []document {
	var docs []document
	cur := document{line: 1}
	lines := bytes.SplitAfter(data, []byte("\n"))
	for i, l := range lines {
		t := bytes.TrimRight(l, "\r\n")
		if bytes.Equal(t, []byte("---")) || bytes.HasPrefix(t, []byte("--- ")) || bytes.HasPrefix(t, []byte("---\t")) {
			docs = append(docs, cur)
			cur = document{line: i + 2}
			continue
		}
		cur.data = append(cur.data, l...)
	}
	return append(docs, cur)
}

// firstContentLine is the line of the first line of d that is not blank or a comment.
func firstContentLine(d document) int {
	for i, l := range bytes.Split(d.data, []byte("\n")) {
		t := bytes.TrimSpace(l)
		if len(t) > 0 && t[0] != '#' {
			return d.line + i
		}
	}
	return d.line
}

func decodeFile(r *Result, dir, name string, kust *Kustomization) error {
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	doc := 0
	for _, d := range splitDocuments(data) {
		raw := d.data
		j, err := yaml.YAMLToJSON(raw)
		if err == nil {
			if t := bytes.TrimSpace(j); bytes.Equal(t, []byte("null")) || len(t) == 0 {
				continue // blank or comments only: not a document
			}
		}
		doc++
		line := firstContentLine(d)
		if err != nil {
			r.Findings = append(r.Findings, Finding{File: name, Doc: doc, Line: line, Msg: "invalid YAML: " + err.Error()})
			continue
		}
		var head struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(raw, &head); err != nil || head.APIVersion == "" || head.Kind == "" {
			r.Findings = append(r.Findings, Finding{File: name, Doc: doc, Line: line, Field: "apiVersion/kind", Msg: "missing or invalid"})
			continue
		}
		desc := strings.TrimSpace(head.Kind + " " + head.Metadata.Name)
		gvk := schema.FromAPIVersionAndKind(head.APIVersion, head.Kind)
		if !scheme.Recognizes(gvk) {
			r.Findings = append(r.Findings, Finding{File: name, Doc: doc, Line: line, Object: desc, Field: "apiVersion/kind",
				Msg: fmt.Sprintf("%s %s is not a known built-in type (misspelled kind or apiVersion?)", head.APIVersion, head.Kind)})
			continue
		}
		obj, _, err := strictDecoder.Decode(raw, nil, nil)
		se, strict := runtime.AsStrictDecodingError(err)
		if err != nil && (!strict || obj == nil) {
			// Wrong type, bad quantity, malformed YAML: nothing usable decoded.
			r.Findings = append(r.Findings, Finding{File: name, Doc: doc, Line: line, Object: desc, Msg: "decoding: " + err.Error()})
			continue
		}
		o := newObject(name, doc, gvk, obj, kust)
		o.Line = line
		if strict {
			// Unknown or duplicate fields: the object still decoded; report each field.
			for _, e := range se.Errors() {
				r.add(o, "", "strict decoding: %v", e)
			}
		}
		if o.Meta.GetName() == "" {
			r.add(o, "metadata.name", "missing")
		}
		r.Objects = append(r.Objects, o)
	}
	return nil
}

func newObject(file string, doc int, gvk schema.GroupVersionKind, obj runtime.Object, kust *Kustomization) *Object {
	m, _ := obj.(metav1.Object)
	if m == nil {
		m = &metav1.ObjectMeta{}
	}
	ns := m.GetNamespace()
	if kust != nil && kust.Namespace != "" {
		ns = kust.Namespace
	}
	if ns == "" {
		ns = "default"
	}
	if gvk.Kind == "Namespace" || gvk.Kind == "ClusterRole" || gvk.Kind == "ClusterRoleBinding" {
		ns = ""
	}
	return &Object{File: file, Doc: doc, GVK: gvk, Obj: obj, Meta: m, NS: ns}
}

// workload is a pod-template owner.
type workload struct {
	o        *Object
	selector *metav1.LabelSelector
	tmpl     *corev1.PodTemplateSpec
	claims   []corev1.PersistentVolumeClaim // StatefulSet volumeClaimTemplates
	service  string                         // StatefulSet serviceName
	long     bool                           // long-running: needs probes
}

func workloadOf(o *Object) *workload {
	switch w := o.Obj.(type) {
	case *appsv1.Deployment:
		return &workload{o: o, selector: w.Spec.Selector, tmpl: &w.Spec.Template, long: true}
	case *appsv1.StatefulSet:
		return &workload{o: o, selector: w.Spec.Selector, tmpl: &w.Spec.Template, claims: w.Spec.VolumeClaimTemplates, service: w.Spec.ServiceName, long: true}
	case *appsv1.DaemonSet:
		return &workload{o: o, selector: w.Spec.Selector, tmpl: &w.Spec.Template, long: true}
	case *appsv1.ReplicaSet:
		return &workload{o: o, selector: w.Spec.Selector, tmpl: &w.Spec.Template, long: true}
	case *batchv1.Job:
		return &workload{o: o, selector: w.Spec.Selector, tmpl: &w.Spec.Template}
	case *batchv1.CronJob:
		return &workload{o: o, tmpl: &w.Spec.JobTemplate.Spec.Template}
	}
	return nil
}

type key struct{ kind, ns, name string }

func semantic(r *Result, kust *Kustomization) {
	have := map[key]*Object{}
	var workloads []*workload
	for _, o := range r.Objects {
		k := key{o.GVK.Kind, o.NS, o.Meta.GetName()}
		if prev, dup := have[k]; dup {
			r.add(o, "metadata.name", "duplicate of %s document %d", prev.File, prev.Doc)
		}
		have[k] = o
		if w := workloadOf(o); w != nil {
			workloads = append(workloads, w)
		}
	}
	exists := func(kind, ns, name string) bool { _, ok := have[key{kind, ns, name}]; return ok }
	generated := map[key]bool{}
	if kust != nil {
		for _, g := range kust.ConfigMapGenerator {
			generated[key{"ConfigMap", kust.Namespace, g.Name}] = true
		}
		for _, g := range kust.SecretGenerator {
			generated[key{"Secret", kust.Namespace, g.Name}] = true
		}
	}
	nsDefined := func(ns string) bool { return ns == "default" || exists("Namespace", "", ns) }

	for _, o := range r.Objects {
		if o.NS != "" && !nsDefined(o.NS) {
			r.add(o, "metadata.namespace", "namespace %q is not defined by any Namespace in the manifests", o.NS)
		}
	}

	for _, w := range workloads {
		checkWorkload(r, w, exists, generated, have)
	}

	// Every Service selector must select some workload's pods.
	for _, o := range r.Objects {
		svc, ok := o.Obj.(*corev1.Service)
		if !ok || svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		if len(svc.Spec.Selector) == 0 {
			continue // a Service without selector has hand-managed endpoints
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		var matched []*workload
		for _, w := range workloads {
			if w.o.NS == o.NS && sel.Matches(labels.Set(w.tmpl.Labels)) {
				matched = append(matched, w)
			}
		}
		if len(matched) == 0 {
			r.add(o, "spec.selector", "%v matches no Deployment/StatefulSet/DaemonSet pod template labels in namespace %s", svc.Spec.Selector, o.NS)
			continue
		}
		for i, p := range svc.Spec.Ports {
			if p.TargetPort.Type != intstr.String {
				continue
			}
			found := false
			for _, w := range matched {
				if hasPortName(w.tmpl.Spec.Containers, p.TargetPort.StrVal) {
					found = true
				}
			}
			if !found {
				r.add(o, fmt.Sprintf("spec.ports[%d].targetPort", i), "named port %q is not a container port of the selected pods", p.TargetPort.StrVal)
			}
		}
	}
}

func hasPortName(cs []corev1.Container, name string) bool {
	for _, c := range cs {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

func checkWorkload(r *Result, w *workload, exists func(kind, ns, name string) bool, generated map[key]bool, have map[key]*Object) {
	o := w.o
	tp := "spec.template"
	if _, ok := o.Obj.(*batchv1.CronJob); ok {
		tp = "spec.jobTemplate.spec.template"
	}
	if w.selector == nil {
		if w.long {
			r.add(o, "spec.selector", "missing")
		}
	} else {
		sel, err := metav1.LabelSelectorAsSelector(w.selector)
		switch {
		case err != nil:
			r.add(o, "spec.selector", "%v", err)
		case sel.Empty():
			r.add(o, "spec.selector", "is empty (selects every pod)")
		case !sel.Matches(labels.Set(w.tmpl.Labels)):
			r.add(o, "spec.selector", "%s does not match %s.metadata.labels %v", sel, tp, w.tmpl.Labels)
		}
	}
	if w.service != "" && !exists("Service", o.NS, w.service) {
		r.add(o, "spec.serviceName", "Service %q is not defined in the manifests", w.service)
	}

	ps := &w.tmpl.Spec
	cmKeys := func(name string) (map[string]bool, bool) {
		ob, ok := have[key{"ConfigMap", o.NS, name}]
		if !ok {
			return nil, false
		}
		cm := ob.Obj.(*corev1.ConfigMap)
		keys := map[string]bool{}
		for k := range cm.Data {
			keys[k] = true
		}
		for k := range cm.BinaryData {
			keys[k] = true
		}
		return keys, true
	}
	secretKeys := func(name string) (map[string]bool, bool) {
		ob, ok := have[key{"Secret", o.NS, name}]
		if !ok {
			return nil, false
		}
		s := ob.Obj.(*corev1.Secret)
		keys := map[string]bool{}
		for k := range s.Data {
			keys[k] = true
		}
		for k := range s.StringData {
			keys[k] = true
		}
		return keys, true
	}
	refConfigMap := func(field, name, k string, optional *bool) {
		if optional != nil && *optional {
			return
		}
		if generated[key{"ConfigMap", o.NS, name}] {
			return
		}
		keys, ok := cmKeys(name)
		if !ok {
			r.add(o, field, "ConfigMap %q is not defined in the manifests", name)
		} else if k != "" && !keys[k] {
			r.add(o, field, "ConfigMap %q has no key %q", name, k)
		}
	}
	refSecret := func(field, name, k string, optional *bool) {
		if optional != nil && *optional {
			return
		}
		if generated[key{"Secret", o.NS, name}] {
			return
		}
		keys, ok := secretKeys(name)
		if !ok {
			r.add(o, field, "Secret %q is not defined in the manifests", name)
		} else if k != "" && !keys[k] {
			r.add(o, field, "Secret %q has no key %q", name, k)
		}
	}

	volumes := map[string]*corev1.Volume{}
	for i := range ps.Volumes {
		v := &ps.Volumes[i]
		f := fmt.Sprintf("%s.spec.volumes[%d]", tp, i)
		volumes[v.Name] = v
		switch {
		case v.ConfigMap != nil:
			refConfigMap(f+".configMap.name", v.ConfigMap.Name, "", v.ConfigMap.Optional)
			for j, it := range v.ConfigMap.Items {
				refConfigMap(fmt.Sprintf("%s.configMap.items[%d].key", f, j), v.ConfigMap.Name, it.Key, v.ConfigMap.Optional)
			}
		case v.Secret != nil:
			refSecret(f+".secret.secretName", v.Secret.SecretName, "", v.Secret.Optional)
			for j, it := range v.Secret.Items {
				refSecret(fmt.Sprintf("%s.secret.items[%d].key", f, j), v.Secret.SecretName, it.Key, v.Secret.Optional)
			}
		case v.PersistentVolumeClaim != nil:
			if !exists("PersistentVolumeClaim", o.NS, v.PersistentVolumeClaim.ClaimName) {
				r.add(o, f+".persistentVolumeClaim.claimName", "PersistentVolumeClaim %q is not defined in the manifests", v.PersistentVolumeClaim.ClaimName)
			}
		case v.Projected != nil:
			for j, s := range v.Projected.Sources {
				sf := fmt.Sprintf("%s.projected.sources[%d]", f, j)
				if s.ConfigMap != nil {
					refConfigMap(sf+".configMap.name", s.ConfigMap.Name, "", s.ConfigMap.Optional)
				}
				if s.Secret != nil {
					refSecret(sf+".secret.name", s.Secret.Name, "", s.Secret.Optional)
				}
			}
		}
	}
	claims := map[string]bool{}
	for _, c := range w.claims {
		claims[c.Name] = true
	}

	check := func(field string, c *corev1.Container, main bool) {
		cf := fmt.Sprintf("%s (%s)", field, c.Name)
		if main && w.long {
			if c.ReadinessProbe == nil {
				r.add(o, cf+".readinessProbe", "missing")
			}
			if c.LivenessProbe == nil {
				r.add(o, cf+".livenessProbe", "missing")
			}
		}
		for _, p := range []struct {
			n string
			p *corev1.Probe
		}{{"readinessProbe", c.ReadinessProbe}, {"livenessProbe", c.LivenessProbe}, {"startupProbe", c.StartupProbe}} {
			if p.p == nil {
				continue
			}
			var port *intstr.IntOrString
			switch {
			case p.p.HTTPGet != nil:
				port = &p.p.HTTPGet.Port
			case p.p.TCPSocket != nil:
				port = &p.p.TCPSocket.Port
			case p.p.GRPC == nil && p.p.Exec == nil:
				r.add(o, cf+"."+p.n, "has no handler (httpGet, tcpSocket, grpc or exec)")
			}
			if port != nil && port.Type == intstr.String && !hasPortName([]corev1.Container{*c}, port.StrVal) {
				r.add(o, cf+"."+p.n, "named port %q is not one of the container's ports", port.StrVal)
			}
		}
		if main {
			req := c.Resources.Requests
			if len(req) == 0 {
				r.add(o, cf+".resources.requests", "missing")
			} else {
				for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
					if _, ok := req[res]; !ok {
						r.add(o, cf+".resources.requests."+string(res), "missing")
					}
				}
			}
		}
		if c.Image == "" {
			r.add(o, cf+".image", "missing")
		}
		for i, m := range c.VolumeMounts {
			mf := fmt.Sprintf("%s.volumeMounts[%d]", cf, i)
			v, ok := volumes[m.Name]
			if !ok {
				if !claims[m.Name] {
					r.add(o, mf+".name", "%q is neither a volume nor a volumeClaimTemplate", m.Name)
				}
				continue
			}
			if m.SubPath != "" && !strings.Contains(m.SubPath, "/") {
				if v.ConfigMap != nil && len(v.ConfigMap.Items) == 0 {
					refConfigMap(mf+".subPath", v.ConfigMap.Name, m.SubPath, v.ConfigMap.Optional)
				}
				if v.Secret != nil && len(v.Secret.Items) == 0 {
					refSecret(mf+".subPath", v.Secret.SecretName, m.SubPath, v.Secret.Optional)
				}
			}
		}
		for i, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			ef := fmt.Sprintf("%s.env[%d] (%s).valueFrom", cf, i, e.Name)
			if s := e.ValueFrom.ConfigMapKeyRef; s != nil {
				refConfigMap(ef+".configMapKeyRef", s.Name, s.Key, s.Optional)
			}
			if s := e.ValueFrom.SecretKeyRef; s != nil {
				refSecret(ef+".secretKeyRef", s.Name, s.Key, s.Optional)
			}
		}
		for i, e := range c.EnvFrom {
			ef := fmt.Sprintf("%s.envFrom[%d]", cf, i)
			if e.ConfigMapRef != nil {
				refConfigMap(ef+".configMapRef", e.ConfigMapRef.Name, "", e.ConfigMapRef.Optional)
			}
			if e.SecretRef != nil {
				refSecret(ef+".secretRef", e.SecretRef.Name, "", e.SecretRef.Optional)
			}
		}
	}
	if len(ps.Containers) == 0 {
		r.add(o, tp+".spec.containers", "missing")
	}
	for i := range ps.Containers {
		check(fmt.Sprintf("%s.spec.containers[%d]", tp, i), &ps.Containers[i], true)
	}
	for i := range ps.InitContainers {
		check(fmt.Sprintf("%s.spec.initContainers[%d]", tp, i), &ps.InitContainers[i], false)
	}
	for i, s := range ps.ImagePullSecrets {
		if !exists("Secret", o.NS, s.Name) && !generated[key{"Secret", o.NS, s.Name}] {
			r.add(o, fmt.Sprintf("%s.spec.imagePullSecrets[%d]", tp, i), "Secret %q is not defined in the manifests", s.Name)
		}
	}
}
