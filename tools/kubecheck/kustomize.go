package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// The kustomization beside the manifests: decoded strictly, and its resources,
// images and generators checked against the directory.

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
