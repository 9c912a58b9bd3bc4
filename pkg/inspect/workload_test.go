package inspect

import (
	"strings"
	"testing"

	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestResolveRef: explain's references find the PodGroups behind a
// workload through its pods' labels or the PodGroup's owner; unknown
// kinds and workloads without groups are errors that name what was looked
// for; a bare name prefers the PodGroup of that name.
func TestResolveRef(t *testing.T) {
	b := scenario() // team-a/train: pods labelled job-name=llm-train
	// A Job whose PodGroup the Job controller made: owned, named NAME-<hash>,
	// pods not created yet.
	b.group("team-a", "eval-5f7c9", 1)
	b.c.PodGroups[len(b.c.PodGroups)-1].OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "eval"}}
	// A JobSet of two groups, an LWS, a RayCluster: found by their pods' labels.
	b.pod("team-b", "js-0", "sweep-a", "", map[string]string{LabelJobSetName: "sweep"})
	b.pod("team-b", "js-1", "sweep-b", "", map[string]string{LabelJobSetName: "sweep"})
	b.pod("team-b", "lws-0", "serve-0", "", map[string]string{LabelLWSName: "serve"})
	b.pod("team-b", "ray-0", "rc-head", "", map[string]string{LabelRayCluster: "rc"})
	// gpufabric-grouper's groups, found by their labels before any pod
	// exists: a TrainJob's (its JobSet has its name), a RayJob's.
	b.group("team-c", "jobset.tune.node", 2)
	b.c.PodGroups[len(b.c.PodGroups)-1].Labels = map[string]string{LabelJobSetName: "tune"}
	b.group("team-c", "ray.batch-x7k2", 3)
	b.c.PodGroups[len(b.c.PodGroups)-1].Labels = map[string]string{LabelRayCluster: "batch-x7k2", LabelRayJob: "batch"}
	// Same Job name in another namespace: not found from team-a.
	b.pod("team-b", "other-0", "other-group", "", map[string]string{LabelJobName: "llm-train"})

	tests := []struct {
		ns, ref  string
		groups   string
		workload string
		wantErr  string
	}{
		{ns: "team-a", ref: "job/llm-train", groups: "train", workload: "job/llm-train"},
		{ns: "team-a", ref: "llm-train", groups: "train", workload: "job/llm-train"},
		{ns: "team-a", ref: "jobs.batch/llm-train", wantErr: `unknown kind "jobs.batch"; want podgroup, compositepodgroup or one of job, jobset, lws, raycluster, trainjob, rayjob`},
		{ns: "team-a", ref: "Job/eval", groups: "eval-5f7c9", workload: "job/eval"},
		{ns: "team-a", ref: "eval", groups: "eval-5f7c9", workload: "job/eval"},
		{ns: "team-a", ref: "train", groups: "train"},
		{ns: "team-a", ref: "podgroup/llm-train", groups: "llm-train"},
		{ns: "team-b", ref: "jobset/sweep", groups: "sweep-a,sweep-b", workload: "jobset/sweep"},
		{ns: "team-b", ref: "sweep", groups: "sweep-a,sweep-b", workload: "jobset/sweep"},
		{ns: "team-b", ref: "lws/serve", groups: "serve-0", workload: "lws/serve"},
		{ns: "team-b", ref: "raycluster/rc", groups: "rc-head", workload: "raycluster/rc"},
		{ns: "team-b", ref: "job/llm-train", groups: "other-group", workload: "job/llm-train"},
		{ns: "team-c", ref: "trainjob/tune", groups: "jobset.tune.node", workload: "trainjob/tune"},
		{ns: "team-c", ref: "jobset/tune", groups: "jobset.tune.node", workload: "jobset/tune"},
		{ns: "team-c", ref: "rayjob/batch", groups: "ray.batch-x7k2", workload: "rayjob/batch"},
		{ns: "team-c", ref: "raycluster/batch-x7k2", groups: "ray.batch-x7k2", workload: "raycluster/batch-x7k2"},
		{ns: "team-b", ref: "ghost", groups: "ghost"}, // NotFound report with the pods naming it
		{ns: "team-b", ref: "job/nope", wantErr: "Job team-b/nope has no PodGroup: none in team-b is owned by a Job named nope or carries batch.kubernetes.io/job-name=nope"},
		{ns: "team-b", ref: "deployment/web", wantErr: `unknown kind "deployment"`},
		{ns: "team-b", ref: "job/", wantErr: "want NAME or KIND/NAME"},
	}
	for _, tc := range tests {
		t.Run(tc.ns+"/"+tc.ref, func(t *testing.T) {
			got, err := ResolveRef(b.c, tc.ns, tc.ref)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if g := strings.Join(got.Groups, ","); g != tc.groups || got.Workload != tc.workload {
				t.Errorf("resolved %q via %q, want %q via %q", g, got.Workload, tc.groups, tc.workload)
			}
		})
	}
}

// TestResolveTree: compositepodgroup/NAME (and a bare NAME that is only a
// CompositePodGroup) finds every PodGroup under it, through nested
// composites, with the tree's outline; a PodGroup of another tree or none
// is left out; an unknown tree is an error.
func TestResolveTree(t *testing.T) {
	b := scenario()
	cpg := func(name, parent, key string, min int32) {
		c := schedulingv1alpha3.CompositePodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name}}
		if parent != "" {
			c.Spec.ParentCompositePodGroupName = &parent
		}
		if key != "" {
			c.Spec.SchedulingConstraints = &schedulingv1alpha3.CompositePodGroupSchedulingConstraints{Topology: []schedulingv1alpha3.TopologyConstraint{{Key: key}}}
		}
		c.Spec.SchedulingPolicy.Gang = &schedulingv1alpha3.CompositeGangSchedulingPolicy{MinGroupCount: min}
		b.c.Composites = append(b.c.Composites, c)
	}
	leaf := func(name, parent string) {
		b.group("ml", name, 1)
		b.c.PodGroups[len(b.c.PodGroups)-1].Spec.ParentCompositePodGroupName = &parent
	}
	cpg("job", "", "rack", 2)
	cpg("replica-0", "job", "", 1)
	leaf("frontend", "job")
	leaf("r0-workers", "replica-0")
	cpg("other", "", "", 1)
	leaf("elsewhere", "other")
	b.group("ml", "flat", 1)
	for _, ref := range []string{"compositepodgroup/job", "cpg/job", "job"} {
		res, err := ResolveRef(b.c, "ml", ref)
		if err != nil || strings.Join(res.Groups, ",") != "frontend,r0-workers" || res.Workload != "compositepodgroup/job" {
			t.Errorf("%s: %+v, %v", ref, res, err)
			continue
		}
		want := "CompositePodGroup/job in one rack, minGroupCount 2|  CompositePodGroup/replica-0, minGroupCount 1|    PodGroup/r0-workers in one gpufabric.dev/nvlinkDomain|  PodGroup/frontend in one gpufabric.dev/nvlinkDomain"
		if got := strings.Join(res.Tree, "|"); got != want {
			t.Errorf("%s: outline %q, want %q", ref, got, want)
		}
	}
	if _, err := ResolveRef(b.c, "ml", "cpg/gone"); err == nil || !strings.Contains(err.Error(), "CompositePodGroup ml/gone does not exist") {
		t.Errorf("unknown tree: %v", err)
	}
}
