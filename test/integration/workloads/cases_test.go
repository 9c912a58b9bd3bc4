package workloads

import (
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// The four smoke cases. Each case's labels and annotations are what
// docs/design/workload-grouping.md lists under "What each controller
// writes on its pods"; a controller that stops writing one fails here.

var (
	jobSets                 = schema.GroupVersionResource{Group: "jobset.x-k8s.io", Version: "v1alpha2", Resource: "jobsets"}
	leaderWorkerSets        = schema.GroupVersionResource{Group: "leaderworkerset.x-k8s.io", Version: "v1", Resource: "leaderworkersets"}
	trainJobs               = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "trainjobs"}
	clusterTrainingRuntimes = schema.GroupVersionResource{Group: "trainer.kubeflow.org", Version: "v1alpha1", Resource: "clustertrainingruntimes"}
	rayClusters             = schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayclusters"}
)

// jobSetCase: a JobSet "train" of two replicated jobs, driver (1 job of 1
// pod) and workers (2 jobs of 2 pods): 5 pods.
func jobSetCase() smokeCase {
	job := func(name string, replicas, pods int64) map[string]any {
		return map[string]any{"name": name, "replicas": replicas, "template": map[string]any{"spec": map[string]any{
			"parallelism": pods, "completions": pods, "backoffLimit": int64(0),
			"template": podTemplate(name, corev1.RestartPolicyNever),
		}}}
	}
	return smokeCase{
		name: "jobset",
		create: func(t *testing.T, dyn dynamic.Interface, ns string) {
			create(t, dyn, jobSets, ns, map[string]any{
				"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
				"metadata": map[string]any{"name": "train", "namespace": ns},
				"spec":     map[string]any{"replicatedJobs": []any{job("driver", 1, 1), job("workers", 2, 2)}},
			})
		},
		pods: 5,
		// One gang per replicated job.
		groups: map[string]int{"jobset.train.driver": 1, "jobset.train.workers": 4}, owner: "JobSet", explain: "jobset/train",
		// JobSet writes its keys on the Jobs' pod templates both as labels
		// and as annotations (jobset.sigs.k8s.io/priority only as a
		// label); the Job controller adds its own.
		labels: withKeys(jobSetKeys, map[string]string{
			"jobset.sigs.k8s.io/jobset-name": "train", "jobset.sigs.k8s.io/global-replicas": "3",
			"jobset.sigs.k8s.io/group-name": "default", "jobset.sigs.k8s.io/group-replicas": "3",
			"jobset.sigs.k8s.io/restart-attempt": "0", "jobset.sigs.k8s.io/priority": "",
			"batch.kubernetes.io/job-name": "",
		}),
		annotations: withKeys(jobSetKeys, map[string]string{"jobset.sigs.k8s.io/jobset-name": "train"}),
		// replicated job / its job's index in it / the job's index in the
		// JobSet / the pod's completion index in its job.
		ranks: func(p *corev1.Pod) string {
			return strings.Join([]string{p.Labels["jobset.sigs.k8s.io/replicatedjob-name"], p.Labels["jobset.sigs.k8s.io/job-index"],
				p.Labels["jobset.sigs.k8s.io/job-global-index"], p.Labels["batch.kubernetes.io/job-completion-index"]}, "/")
		},
		want: []string{"driver/0/0/0", "workers/0/1/0", "workers/0/1/1", "workers/1/2/0", "workers/1/2/1"},
	}
}

// jobSetKeys are the keys JobSet writes on every pod as labels and as
// annotations (and the Job controller's completion index).
var jobSetKeys = []string{
	"jobset.sigs.k8s.io/jobset-name", "jobset.sigs.k8s.io/jobset-uid",
	"jobset.sigs.k8s.io/replicatedjob-name", "jobset.sigs.k8s.io/replicatedjob-replicas",
	"jobset.sigs.k8s.io/job-index", "jobset.sigs.k8s.io/job-global-index", "jobset.sigs.k8s.io/job-key",
	"jobset.sigs.k8s.io/global-replicas", "jobset.sigs.k8s.io/group-name", "jobset.sigs.k8s.io/group-replicas",
	"jobset.sigs.k8s.io/job-group-index", "jobset.sigs.k8s.io/restart-attempt",
	"batch.kubernetes.io/job-completion-index",
}

// withKeys returns values plus each of keys (any value) it does not name.
func withKeys(keys []string, values map[string]string) map[string]string {
	out := maps.Clone(values)
	for _, k := range keys {
		if _, ok := out[k]; !ok {
			out[k] = ""
		}
	}
	return out
}

// lwsCase: a LeaderWorkerSet "serve" of 1 group of size 4: a leader and 3
// workers.
func lwsCase() smokeCase {
	return smokeCase{
		name: "lws",
		create: func(t *testing.T, dyn dynamic.Interface, ns string) {
			create(t, dyn, leaderWorkerSets, ns, map[string]any{
				"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
				"metadata": map[string]any{"name": "serve", "namespace": ns},
				"spec": map[string]any{"replicas": int64(1), "leaderWorkerTemplate": map[string]any{
					"size": int64(4), "workerTemplate": podTemplate("serve", corev1.RestartPolicyAlways),
				}},
			})
		},
		pods: 4,
		// One gang per group: leader and workers.
		groups: map[string]int{"lws.serve.0": 4}, owner: "LeaderWorkerSet", explain: "lws/serve",
		// group-index, group-key and worker-index come from LWS's pod
		// webhook; the StatefulSet controller adds apps.kubernetes.io/pod-index.
		labels: map[string]string{
			"leaderworkerset.sigs.k8s.io/name": "serve", "leaderworkerset.sigs.k8s.io/group-index": "0",
			"leaderworkerset.sigs.k8s.io/worker-index": "", "leaderworkerset.sigs.k8s.io/group-key": "",
			"leaderworkerset.sigs.k8s.io/template-revision-hash": "", "apps.kubernetes.io/pod-index": "",
		},
		annotations: map[string]string{"leaderworkerset.sigs.k8s.io/size": "4"},
		// group / worker index / the leader a worker names (the leader
		// names none).
		ranks: func(p *corev1.Pod) string {
			return p.Labels["leaderworkerset.sigs.k8s.io/group-index"] + "/" + p.Labels["leaderworkerset.sigs.k8s.io/worker-index"] +
				"/" + p.Annotations["leaderworkerset.sigs.k8s.io/leader-name"]
		},
		want: []string{"0/0/", "0/1/serve-0", "0/2/serve-0", "0/3/serve-0"},
	}
}

// trainerCase: a TrainJob "train" of 2 nodes on a ClusterTrainingRuntime
// shaped like Trainer's torch-distributed (the pod template names
// gpufabric-scheduler and the GPU claim: a TrainJob's runtimePatches can
// set neither).
func trainerCase() smokeCase {
	const runtimeName = "gpufabric-torch"
	return smokeCase{
		name: "trainer",
		create: func(t *testing.T, dyn dynamic.Interface, ns string) {
			create(t, dyn, clusterTrainingRuntimes, "", map[string]any{
				"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
				"metadata": map[string]any{"name": runtimeName, "labels": map[string]any{"trainer.kubeflow.org/framework": "torch"}},
				"spec": map[string]any{
					"mlPolicy": map[string]any{"numNodes": int64(1), "torch": map[string]any{}},
					"template": map[string]any{"spec": map[string]any{"replicatedJobs": []any{map[string]any{
						"name": "node",
						"template": map[string]any{
							"metadata": map[string]any{"labels": map[string]any{"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
							"spec":     map[string]any{"template": podTemplate("node", corev1.RestartPolicyNever)},
						},
					}}}},
				},
			})
			create(t, dyn, trainJobs, ns, map[string]any{
				"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
				"metadata": map[string]any{"name": "train", "namespace": ns},
				"spec": map[string]any{
					"runtimeRef": map[string]any{"name": runtimeName},
					"trainer":    map[string]any{"numNodes": int64(2)},
				},
			})
		},
		pods: 2,
		// The TrainJob's JobSet is grouped (its TrainJob's annotations apply).
		groups: map[string]int{"jobset.train.node": 2}, owner: "JobSet", explain: "trainjob/train",
		// Trainer writes no key on pods: they are its JobSet's.
		labels: map[string]string{
			"jobset.sigs.k8s.io/jobset-name": "train", "jobset.sigs.k8s.io/replicatedjob-name": "node",
			"jobset.sigs.k8s.io/replicatedjob-replicas": "1", "jobset.sigs.k8s.io/job-index": "0",
			"batch.kubernetes.io/job-completion-index": "",
		},
		annotations: map[string]string{},
		ranks:       func(p *corev1.Pod) string { return p.Labels["batch.kubernetes.io/job-completion-index"] },
		want:        []string{"0", "1"},
		check:       checkTrainJob,
	}
}

// checkTrainJob: what ties the pods to the TrainJob and ranks them is
// outside the pods' labels: the JobSet is the TrainJob's (controller owner
// reference), its Job carries the runtime's ancestor label, and each pod's
// node container gets torchrun's PET_NNODES and PET_NODE_RANK (the Job's
// completion index).
func checkTrainJob(t *testing.T, admin kubernetes.Interface, dyn dynamic.Interface, ns string, pods []corev1.Pod) {
	t.Helper()
	js, err := dyn.Resource(jobSets).Namespace(ns).Get(t.Context(), "train", metav1.GetOptions{})
	itest.Must(t, "get the TrainJob's JobSet", err)
	if ref := metav1.GetControllerOf(js); ref == nil || ref.Kind != "TrainJob" || ref.Name != "train" {
		t.Errorf("JobSet train's controller %v, want TrainJob train", ref)
	}
	job, err := admin.BatchV1().Jobs(ns).Get(t.Context(), "train-node-0", metav1.GetOptions{})
	itest.Must(t, "get the JobSet's Job", err)
	if got := job.Labels["trainer.kubeflow.org/trainjob-ancestor-step"]; got != "trainer" {
		t.Errorf("Job %s: trainer.kubeflow.org/trainjob-ancestor-step=%q, want trainer", job.Name, got)
	}
	for _, p := range pods {
		env := map[string]corev1.EnvVar{}
		for _, c := range p.Spec.Containers {
			if c.Name == "node" {
				for _, e := range c.Env {
					env[e.Name] = e
				}
			}
		}
		if env["PET_NNODES"].Value != "2" {
			t.Errorf("pod %s: PET_NNODES %+v, want 2", p.Name, env["PET_NNODES"])
		}
		rank := env["PET_NODE_RANK"].ValueFrom
		if rank == nil || rank.FieldRef == nil || !strings.Contains(rank.FieldRef.FieldPath, "batch.kubernetes.io/job-completion-index") {
			t.Errorf("pod %s: PET_NODE_RANK %+v, want the Job's completion index", p.Name, env["PET_NODE_RANK"])
		}
	}
}

// kubeRayCase: a RayCluster "ray" of a head and one worker group "gpu" of
// 2 workers.
func kubeRayCase() smokeCase {
	return smokeCase{
		name: "kuberay",
		create: func(t *testing.T, dyn dynamic.Interface, ns string) {
			create(t, dyn, rayClusters, ns, map[string]any{
				"apiVersion": "ray.io/v1", "kind": "RayCluster",
				"metadata": map[string]any{"name": "ray", "namespace": ns},
				"spec": map[string]any{
					"rayVersion": "2.52.0",
					"headGroupSpec": map[string]any{
						"rayStartParams": map[string]any{},
						"template":       podTemplate("ray-head", corev1.RestartPolicyAlways),
					},
					"workerGroupSpecs": []any{map[string]any{
						"groupName": "gpu", "replicas": int64(2), "minReplicas": int64(2), "maxReplicas": int64(2),
						"rayStartParams": map[string]any{},
						"template":       podTemplate("ray-worker", corev1.RestartPolicyAlways),
					}},
				},
			})
		},
		pods: 3,
		// The head and its workers are one gang.
		groups: map[string]int{"ray.ray": 3}, owner: "RayCluster", explain: "raycluster/ray",
		labels: map[string]string{
			"ray.io/cluster": "ray", "ray.io/node-type": "", "ray.io/group": "", "ray.io/identifier": "",
			"ray.io/is-ray-node": "yes", "app.kubernetes.io/created-by": "kuberay-operator",
		},
		annotations: map[string]string{},
		// Workers are numbered within their group
		// (ray.io/worker-group-replica-index); the head is not.
		ranks: func(p *corev1.Pod) string {
			return p.Labels["ray.io/node-type"] + "/" + p.Labels["ray.io/group"] + "/" + p.Labels["ray.io/worker-group-replica-index"]
		},
		want: []string{"head/headgroup/", "worker/gpu/0", "worker/gpu/1"},
	}
}
