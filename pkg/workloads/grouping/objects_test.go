package grouping

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

var update = flag.Bool("update", false, "rewrite the chart's generated policy files")

// TestObjects: a flat JobSet plan gives a Workload with one template per
// replicated job and PodGroups owned by the JobSet that name it; the
// scheduler's annotations, the guard's UID, claims and the disruption
// mode are carried.
func TestObjects(t *testing.T) {
	js := jobSetObj("train", map[string]string{AnnotationGroupClaims: "fabric", AnnotationDisruptionMode: "All", topology.AnnotationRailAlignment: "required"},
		rj("workers", 2, 2, podTemplate("", claims("gpus", "fabric")), nil), rj("eval", 1, 1, podTemplate("", claims("fabric")), map[string]string{AnnotationTopologyKey: "rack"}))
	p, err := PlanFor(Input{Kind: KindJobSet, Object: js, Mode: ModeFlat})
	if err != nil || p == nil || len(p.Problems) > 0 {
		t.Fatalf("plan %+v, %v", p, err)
	}
	o := p.Objects()
	w := o.Workload
	if w == nil || w.Name != "jobset.train" || w.Spec.ControllerRef.Kind != "JobSet" || w.Spec.ControllerRef.APIGroup != "jobset.x-k8s.io" || len(w.Spec.PodGroupTemplates) != 2 {
		t.Fatalf("workload %+v", w)
	}
	if len(o.PodGroups) != 2 || len(o.Composites) != 0 {
		t.Fatalf("%d PodGroups, %d composites", len(o.PodGroups), len(o.Composites))
	}
	pg := o.PodGroups[0]
	ref := pg.OwnerReferences[0]
	switch {
	case pg.Name != "jobset.train.workers" || pg.Namespace != "ns":
		t.Errorf("name %s/%s", pg.Namespace, pg.Name)
	case ref.UID != "uid-train" || !ptr.Deref(ref.Controller, false) || ref.Kind != "JobSet" || ref.APIVersion != "jobset.x-k8s.io/v1alpha2":
		t.Errorf("owner %+v", ref)
	case pg.Labels[LabelManagedBy] != ManagedBy || pg.Labels[LabelJobSetName] != "train" || pg.Annotations[AnnotationMemberOwnerUID] != "uid-train" || pg.Annotations[topology.AnnotationRailAlignment] != "required":
		t.Errorf("labels %v annotations %v", pg.Labels, pg.Annotations)
	case pg.Spec.SchedulingPolicy.Gang == nil || pg.Spec.SchedulingPolicy.Gang.MinCount != 4:
		t.Errorf("policy %+v", pg.Spec.SchedulingPolicy)
	case pg.Spec.WorkloadRef == nil || pg.Spec.WorkloadRef.WorkloadName != "jobset.train" || pg.Spec.WorkloadRef.TemplateName != "workers":
		t.Errorf("workloadRef %+v", pg.Spec.WorkloadRef)
	case len(pg.Spec.ResourceClaims) != 1 || pg.Spec.ResourceClaims[0].Name != "fabric" || ptr.Deref(pg.Spec.ResourceClaims[0].ResourceClaimTemplateName, "") != "fabric-template":
		t.Errorf("claims %+v", pg.Spec.ResourceClaims)
	case pg.Spec.DisruptionMode == nil || pg.Spec.DisruptionMode.All == nil:
		t.Errorf("disruption mode %+v", pg.Spec.DisruptionMode)
	case pg.Spec.SchedulingConstraints != nil:
		t.Errorf("workers got a topology: %+v", pg.Spec.SchedulingConstraints)
	}
	if sc := o.PodGroups[1].Spec.SchedulingConstraints; sc == nil || sc.Topology[0].Key != "rack" {
		t.Errorf("eval's topology %+v", sc)
	}
}

// TestObjectsManyTemplates: more replicated jobs than a Workload holds
// templates: no Workload, PodGroups name none.
func TestObjectsManyTemplates(t *testing.T) {
	var rjs []map[string]any
	for i := range 9 {
		rjs = append(rjs, rj(fmt.Sprint("r", i), 1, 1, podTemplate("", nil), nil))
	}
	p, err := PlanFor(Input{Kind: KindJobSet, Object: jobSetObj("many", nil, rjs...), Mode: ModeFlat})
	if err != nil {
		t.Fatal(err)
	}
	o := p.Objects()
	if o.Workload != nil || len(o.PodGroups) != 9 || o.PodGroups[0].Spec.WorkloadRef != nil {
		t.Errorf("workload %v, %d PodGroups, ref %v", o.Workload, len(o.PodGroups), o.PodGroups[0].Spec.WorkloadRef)
	}
}

// TestObjectsComposite: a RayCluster in composite mode is a
// CompositePodGroup over the head's and each worker group's PodGroups,
// and a Workload of one composite template with a PodGroup template each.
func TestObjectsComposite(t *testing.T) {
	p, err := PlanFor(Input{Kind: KindRayCluster, Object: rayObj("rc", map[string]string{AnnotationTopologyKey: "rack"}, false, rayGroup("gpu", 2, 2, 1), rayGroup("Bad_Name", 1, 1, 1)), Mode: ModeComposite})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Problems) != 1 || !strings.Contains(p.Problems[0].Message, "worker group Bad_Name") {
		t.Fatalf("problems %v", p.Problems)
	}
	p, err = PlanFor(Input{Kind: KindRayCluster, Object: rayObj("rc", map[string]string{AnnotationTopologyKey: "rack"}, false, rayGroup("gpu", 2, 2, 1)), Mode: ModeComposite})
	if err != nil {
		t.Fatal(err)
	}
	o := p.Objects()
	if len(o.Composites) != 1 || len(o.PodGroups) != 2 {
		t.Fatalf("%d composites, %d PodGroups", len(o.Composites), len(o.PodGroups))
	}
	c := o.Composites[0]
	if c.Name != "ray.rc" || c.Spec.SchedulingPolicy.Gang.MinGroupCount != 2 || c.Spec.WorkloadRef.TemplateName != "cluster" || c.Spec.SchedulingConstraints.Topology[0].Key != "rack" || c.Spec.ParentCompositePodGroupName != nil {
		t.Errorf("composite %+v", c.Spec)
	}
	for _, pg := range o.PodGroups {
		if ptr.Deref(pg.Spec.ParentCompositePodGroupName, "") != "ray.rc" || pg.Spec.SchedulingConstraints != nil {
			t.Errorf("PodGroup %s: parent %v, constraints %v", pg.Name, pg.Spec.ParentCompositePodGroupName, pg.Spec.SchedulingConstraints)
		}
	}
	w := o.Workload
	if len(w.Spec.PodGroupTemplates) != 0 || len(w.Spec.CompositePodGroupTemplates) != 1 || len(w.Spec.CompositePodGroupTemplates[0].PodGroupTemplates) != 2 {
		t.Errorf("workload %+v", w.Spec)
	}
}

// TestTemplateName: DNS labels stay, anything else is cleaned, cut and
// hashed (deterministic, distinct).
func TestTemplateName(t *testing.T) {
	for in, want := range map[string]string{"workers": "workers", "Bad_Name": "bad-name-", strings.Repeat("x", 80): strings.Repeat("x", 50) + "-", "__": "t-"} {
		got := templateName(in)
		if !strings.HasPrefix(got, want) || len(got) > 63 || (got != in && got == templateName(in+"!")) {
			t.Errorf("templateName(%q) = %q; want prefix %q", in, got, want)
		}
	}
}

// TestChartPolicyFiles: the chart's admission policy files are what the
// rules generate (-update rewrites them).
func TestChartPolicyFiles(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "deployments", "helm", "gpufabric", "files", "admission")
	for file, spec := range map[string]admissionregistrationv1.MutatingAdmissionPolicySpec{
		"pod-groups.yaml":           PodGroupPolicy(ModeFlat),
		"pod-groups-composite.yaml": PodGroupPolicy(ModeComposite),
	} {
		want, err := ChartPolicyFile(spec)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, file)
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the rules generate: go test ./pkg/workloads/grouping -run TestChartPolicyFiles -update", path)
		}
	}
}
