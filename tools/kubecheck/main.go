// Command kubecheck validates the Kubernetes manifests of deploy/k8s offline: every
// document is decoded strictly into its typed object from k8s.io/api (unknown or
// misspelled fields and wrong types fail), then checked for probes, resource requests,
// selector/label agreement, dangling Service selectors, references to ConfigMaps,
// Secrets and PersistentVolumeClaims that no manifest defines, and a kustomization.yaml
// that lists every manifest.
//
// Usage: go run . [DIR]   (default ../../deploy/k8s). Exits 1 when anything is found.
package main

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

func main() {
	dir := "../../deploy/k8s"
	switch len(os.Args) {
	case 1:
	case 2:
		dir = os.Args[1]
	default:
		fmt.Fprintln(os.Stderr, "usage: kubecheck [DIR]")
		os.Exit(2)
	}
	res, err := Check(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubecheck:", err)
		os.Exit(2)
	}
	for _, f := range res.Findings {
		fmt.Fprintln(os.Stderr, f)
	}
	if len(res.Findings) > 0 {
		fmt.Fprintf(os.Stderr, "kubecheck: %d problem(s) in %s\n", len(res.Findings), dir)
		os.Exit(1)
	}
	counts := map[string]int{}
	files := map[string]bool{}
	for _, o := range res.Objects {
		counts[o.GVK.Kind]++
		files[o.File] = true
	}
	kinds := make([]string, 0, len(counts))
	for k, n := range counts {
		kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(kinds)
	fmt.Printf("kubecheck: %s: %d objects in %d files OK (%s); strict typed decoding and semantic checks passed\n",
		dir, len(res.Objects), len(files), strings.Join(kinds, ", "))
}
