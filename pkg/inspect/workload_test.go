package inspect

import (
	"strings"
	"testing"

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
		{ns: "team-a", ref: "jobs.batch/llm-train", wantErr: `unknown kind "jobs.batch"; want podgroup or one of job, jobset, lws, raycluster, trainjob, rayjob`},
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
