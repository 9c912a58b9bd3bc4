package grouping

import (
	"maps"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// obj is an unstructured workload.
func obj(apiVersion, kind, name string, annotations map[string]string, spec map[string]any) *unstructured.Unstructured {
	meta := map[string]any{"name": name, "namespace": "ns", "uid": "uid-" + name}
	if annotations != nil {
		a := map[string]any{}
		for k, v := range annotations {
			a[k] = v
		}
		meta["annotations"] = a
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": meta, "spec": spec}}
}

// podTemplate is a pod template for scheduler (gpufabric's when "").
func podTemplate(scheduler string, extra map[string]any) map[string]any {
	if scheduler == "" {
		scheduler = topology.SchedulerName
	}
	spec := map[string]any{"schedulerName": scheduler, "containers": []any{map[string]any{"name": "c", "image": "i"}}}
	maps.Copy(spec, extra)
	return map[string]any{"spec": spec}
}

func withAnnotations(t map[string]any, a map[string]string) map[string]any {
	m := map[string]any{}
	for k, v := range a {
		m[k] = v
	}
	t["metadata"] = map[string]any{"annotations": m}
	return t
}

// rj is a replicated job of replicas Jobs of parallelism pods.
func rj(name string, replicas, parallelism int64, tmpl map[string]any, jobAnnotations map[string]string) map[string]any {
	job := map[string]any{"spec": map[string]any{"parallelism": parallelism, "completionMode": "Indexed", "template": tmpl}}
	if jobAnnotations != nil {
		withAnnotations(job, jobAnnotations)
	}
	return map[string]any{"name": name, "replicas": replicas, "template": job}
}

func jobSetObj(name string, annotations map[string]string, rjs ...map[string]any) *unstructured.Unstructured {
	list := make([]any, len(rjs))
	for i := range rjs {
		list[i] = rjs[i]
	}
	return obj("jobset.x-k8s.io/v1alpha2", "JobSet", name, annotations, map[string]any{"replicatedJobs": list})
}

func lwsObj(name string, annotations map[string]string, replicas, size int64, startup string, scheduler string) *unstructured.Unstructured {
	spec := map[string]any{"replicas": replicas, "leaderWorkerTemplate": map[string]any{"size": size, "workerTemplate": podTemplate(scheduler, nil)}}
	if startup != "" {
		spec["startupPolicy"] = startup
	}
	return obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", name, annotations, spec)
}

func rayObj(name string, annotations map[string]string, autoscaling bool, groups ...map[string]any) *unstructured.Unstructured {
	list := make([]any, len(groups))
	for i := range groups {
		list[i] = groups[i]
	}
	spec := map[string]any{"headGroupSpec": map[string]any{"template": podTemplate("", nil)}, "workerGroupSpecs": list, "enableInTreeAutoscaling": autoscaling}
	return obj("ray.io/v1", "RayCluster", name, annotations, spec)
}

func rayGroup(name string, replicas, minReplicas, hosts int64) map[string]any {
	return map[string]any{"groupName": name, "replicas": replicas, "minReplicas": minReplicas, "maxReplicas": int64(100), "numOfHosts": hosts, "template": podTemplate("", nil)}
}

func jobObj(name string, annotations map[string]string, parallelism int64, indexed bool, scheduler string) *unstructured.Unstructured {
	spec := map[string]any{"parallelism": parallelism, "completions": parallelism, "template": podTemplate(scheduler, nil)}
	if indexed {
		spec["completionMode"] = "Indexed"
	}
	return obj("batch/v1", "Job", name, annotations, spec)
}

func claims(names ...string) map[string]any {
	var list []any
	for _, n := range names {
		list = append(list, map[string]any{"name": n, "resourceClaimTemplateName": n + "-template"})
	}
	return map[string]any{"resourceClaims": list}
}
