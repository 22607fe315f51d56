package main

import (
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Checks across objects: names are unique, namespaces, services, config maps, secrets and
// volume claims that objects refer to are defined, selectors match, and each workload's
// containers are complete (image, probes, resource requests, mounts).

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
