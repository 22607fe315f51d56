package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The shipped manifests pass.
func TestDeployK8s(t *testing.T) {
	res, err := Check("../../deploy/k8s")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Findings {
		t.Error(f)
	}
	if len(res.Objects) == 0 {
		t.Fatal("no objects decoded")
	}
}

const brokenKustomization = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: demo
resources:
  - namespace.yaml
  - app.yaml
  - gone.yaml
`

const brokenNamespace = `apiVersion: v1
kind: Namespace
metadata:
  name: demo
`

// app.yaml: a Deployment with a misspelled field (readinesProbe), a container without a
// liveness probe or resource requests, a wrong type, a selector that misses its template,
// a missing ConfigMap; a Service whose selector matches nothing.
const brokenApp = `# leading comment only document
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
        - name: web
          image: example/web:1
          ports: [{name: http, containerPort: 8080}]
          readinesProbe:
            httpGet: {path: /, port: http}
          livenessProbe:
            httpGet: {path: /, port: http}
          resources:
            requests: {cpu: 100m, memory: 64Mi}
          volumeMounts:
            - {name: conf, mountPath: /etc/web}
      volumes:
        - name: conf
          configMap: {name: web-config}
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  serviceName: db
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: database}
    spec:
      containers:
        - name: db
          image: example/db:1
          readinessProbe:
            tcpSocket: {port: 5432}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: typed
spec:
  replicas: two
  selector:
    matchLabels: {app: typed}
  template:
    metadata:
      labels: {app: typed}
    spec:
      containers: [{name: c, image: x}]
---
apiVersion: v1
kind: Service
metadata:
  name: orphan
spec:
  selector: {app: nothing-has-this-label}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Servcie
metadata:
  name: typo-kind
`

func TestBrokenManifests(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"kustomization.yaml": brokenKustomization,
		"namespace.yaml":     brokenNamespace,
		"app.yaml":           brokenApp,
		"unlisted.yaml":      brokenNamespace,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Check(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range res.Findings {
		got = append(got, f.String())
	}
	all := strings.Join(got, "\n")
	t.Logf("findings:\n%s", all)

	want := []struct{ what, substr string }{
		{"misspelled field", `app.yaml:3: document 1 (Deployment web): strict decoding: unknown field "spec.template.spec.containers[0].readinesProbe"`},
		{"probe lost to the misspelling", `app.yaml:3: document 1 (Deployment web): spec.template.spec.containers[0] (web).readinessProbe: missing`},
		{"missing liveness probe", `app.yaml:31: document 2 (StatefulSet db): spec.template.spec.containers[0] (db).livenessProbe: missing`},
		{"missing resource requests", `app.yaml:31: document 2 (StatefulSet db): spec.template.spec.containers[0] (db).resources.requests: missing`},
		{"selector vs template labels", `app.yaml:31: document 2 (StatefulSet db): spec.selector: app=db does not match spec.template.metadata.labels`},
		{"undefined governing Service", `app.yaml:31: document 2 (StatefulSet db): spec.serviceName: Service "db" is not defined`},
		{"wrong type", `app.yaml:49: document 3 (Deployment typed): decoding:`},
		{"dangling Service selector", `app.yaml:63: document 4 (Service orphan): spec.selector: map[app:nothing-has-this-label] matches no`},
		{"unknown kind", `app.yaml:71: document 5 (Servcie typo-kind): apiVersion/kind: v1 Servcie is not a known built-in type`},
		{"missing ConfigMap", `app.yaml:3: document 1 (Deployment web): spec.template.spec.volumes[0].configMap.name: ConfigMap "web-config" is not defined`},
		{"kustomization lists a missing file", `kustomization.yaml: document 1: resources[2]: "gone.yaml" does not exist`},
		{"kustomization misses a file", `kustomization.yaml: document 1: resources: does not list unlisted.yaml`},
	}
	for _, w := range want {
		if !strings.Contains(all, w.substr) {
			t.Errorf("%s: no finding containing %q", w.what, w.substr)
		}
	}
	if !strings.Contains(all, "replicas") {
		t.Errorf("wrong type: the decoding error does not name the field replicas")
	}
}

func TestStrictKustomization(t *testing.T) {
	dir := t.TempDir()
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresource:\n  - a.yaml\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Check(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) == 0 || !strings.Contains(res.Findings[0].String(), `unknown field "resource"`) {
		t.Errorf("misspelled kustomization field not reported: %v", res.Findings)
	}
}
