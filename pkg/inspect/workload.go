package inspect

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WorkloadKind is a kind of workload that `explain KIND/NAME` accepts: its
// pods carry PodLabel = NAME, and its controller may own the PodGroups
// (ownerReferences of kind Kind in API group Group).
type WorkloadKind struct {
	// Prefixes name the kind in a reference ("job", "jobs", "job.batch").
	Prefixes []string
	Kind     string
	Group    string
	PodLabel string
}

// Labels that workload controllers put on their pods, naming the workload.
const (
	LabelJobSetName = "jobset.sigs.k8s.io/jobset-name"
	LabelLWSName    = "leaderworkerset.sigs.k8s.io/name"
	LabelRayCluster = "ray.io/cluster"
	// LabelRayJob is on a RayJob's RayCluster, and on the PodGroups
	// gpufabric-grouper makes for it: the RayJob's name.
	LabelRayJob = "ray.io/originated-from-cr-name"
)

// WorkloadKinds lists the workload kinds explain resolves, in the order a
// bare name is tried. A new kind is one more entry.
func WorkloadKinds() []WorkloadKind {
	return []WorkloadKind{
		{Prefixes: []string{"job", "jobs", "job.batch"}, Kind: "Job", Group: "batch", PodLabel: LabelJobName},
		{Prefixes: []string{"jobset", "jobsets", "jobset.jobset.x-k8s.io"}, Kind: "JobSet", Group: "jobset.x-k8s.io", PodLabel: LabelJobSetName},
		{Prefixes: []string{"lws", "leaderworkerset", "leaderworkersets"}, Kind: "LeaderWorkerSet", Group: "leaderworkerset.x-k8s.io", PodLabel: LabelLWSName},
		{Prefixes: []string{"raycluster", "rayclusters", "raycluster.ray.io"}, Kind: "RayCluster", Group: "ray.io", PodLabel: LabelRayCluster},
		// A TrainJob's JobSet has its name: its pods carry it as the
		// JobSet's, and so do the PodGroups gpufabric-grouper makes.
		{Prefixes: []string{"trainjob", "trainjobs", "trainjob.trainer.kubeflow.org"}, Kind: "TrainJob", Group: "trainer.kubeflow.org", PodLabel: LabelJobSetName},
		// A RayJob's groups are its RayCluster's, labelled with its name by
		// gpufabric-grouper.
		{Prefixes: []string{"rayjob", "rayjobs", "rayjob.ray.io"}, Kind: "RayJob", Group: "ray.io", PodLabel: LabelRayJob},
	}
}

// Resolved is what an explain reference names: PodGroups, and the workload
// they were found through ("" for a PodGroup named directly).
type Resolved struct {
	Groups []string
	// Workload is "job/llm-train" when the groups were found through a Job.
	Workload string
	// Tree outlines the CompositePodGroup tree the groups were found
	// through, a line per group.
	Tree []string
}

// ResolveRef turns an explain reference into PodGroup names in namespace
// ns:
//   - "podgroup/NAME" (or "pg/NAME"): that PodGroup;
//   - "compositepodgroup/NAME" (or "cpg/NAME"): the PodGroups of the
//     CompositePodGroup tree under NAME (resolveTree);
//   - "KIND/NAME" with a kind of WorkloadKinds: the PodGroups owned by the
//     workload or named by its pods (spec.schedulingGroup.podGroupName of
//     the pods labelled PodLabel=NAME); none is an error naming what was
//     looked for;
//   - a bare NAME: the PodGroup when it exists, else the PodGroups of the
//     first workload kind that has any, else the name itself (explain
//     reports it NotFound with the pods that name it).
func ResolveRef(c *Cluster, ns, ref string) (Resolved, error) {
	prefix, name, hasKind := strings.Cut(ref, "/")
	if !hasKind {
		name = prefix
	}
	if name == "" || strings.Contains(name, "/") {
		return Resolved{}, fmt.Errorf("explain %q: want NAME or KIND/NAME", ref)
	}
	kinds := WorkloadKinds()
	if hasKind {
		p := strings.ToLower(prefix)
		if slices.Contains([]string{"podgroup", "podgroups", "pg"}, p) {
			return Resolved{Groups: []string{name}}, nil
		}
		if slices.Contains(treePrefixes, p) {
			return resolveTree(c, ns, name)
		}
		for _, k := range kinds {
			if slices.Contains(k.Prefixes, p) {
				return resolveKind(c, ns, k, name)
			}
		}
		return Resolved{}, fmt.Errorf("explain %q: unknown kind %q; want podgroup, compositepodgroup or one of %s", ref, prefix, kindNames(kinds))
	}
	if findGroup(c.PodGroups, ns, name) != nil {
		return Resolved{Groups: []string{name}}, nil
	}
	if findComposite(c.Composites, ns, name) != nil {
		return resolveTree(c, ns, name)
	}
	for _, k := range kinds {
		if groups := groupsOfWorkload(c, ns, k, name); len(groups) > 0 {
			return Resolved{Groups: groups, Workload: k.Prefixes[0] + "/" + name}, nil
		}
	}
	return Resolved{Groups: []string{name}}, nil
}

func resolveKind(c *Cluster, ns string, k WorkloadKind, name string) (Resolved, error) {
	groups := groupsOfWorkload(c, ns, k, name)
	if len(groups) == 0 {
		return Resolved{}, fmt.Errorf("%s %s/%s has no PodGroup: none in %s is owned by a %s named %s or carries %s=%s, and no pod with that label names one (spec.schedulingGroup.podGroupName)",
			k.Kind, ns, name, ns, k.Kind, name, k.PodLabel, name)
	}
	return Resolved{Groups: groups, Workload: k.Prefixes[0] + "/" + name}, nil
}

// groupsOfWorkload lists, sorted, the PodGroups of namespace ns that the
// workload owns or labels, and those its pods name.
func groupsOfWorkload(c *Cluster, ns string, k WorkloadKind, name string) []string {
	var out []string
	add := func(g string) {
		if g != "" && !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	for i := range c.PodGroups {
		pg := &c.PodGroups[i]
		if pg.Namespace == ns && (ownedBy(pg.OwnerReferences, k, name) || pg.Labels[k.PodLabel] == name) {
			add(pg.Name)
		}
	}
	for i := range c.Pods {
		if p := &c.Pods[i]; p.Namespace == ns && workloadOf(p, k) == name {
			add(podGroupOf(p))
		}
	}
	slices.Sort(out)
	return out
}

func workloadOf(p *corev1.Pod, k WorkloadKind) string {
	if v := p.Labels[k.PodLabel]; v != "" {
		return v
	}
	for _, r := range p.OwnerReferences {
		if r.Kind == k.Kind && apiGroup(r.APIVersion) == k.Group {
			return r.Name
		}
	}
	return ""
}

func ownedBy(refs []metav1.OwnerReference, k WorkloadKind, name string) bool {
	for _, r := range refs {
		if r.Kind == k.Kind && r.Name == name && apiGroup(r.APIVersion) == k.Group {
			return true
		}
	}
	return false
}

// apiGroup is the group of an apiVersion ("batch/v1": "batch", "v1": "").
func apiGroup(apiVersion string) string {
	g, _, ok := strings.Cut(apiVersion, "/")
	if !ok {
		return ""
	}
	return g
}

func kindNames(kinds []WorkloadKind) string {
	var names []string
	for _, k := range kinds {
		names = append(names, k.Prefixes[0])
	}
	return strings.Join(names, ", ")
}
