package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// Manifest files: split into YAML documents, each decoded strictly into its typed
// Kubernetes object.

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
