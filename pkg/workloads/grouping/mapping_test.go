package grouping

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// summary is a plan's groups as "name size/min [key]" lines, children
// indented.
func summary(p *Plan) []string {
	var out []string
	var walk func([]Group, string)
	walk = func(gs []Group, indent string) {
		for _, g := range gs {
			line := fmt.Sprintf("%s%s %d/%d", indent, g.Name, g.Size, g.MinCount)
			if g.TopologyKey != "" {
				line += " " + g.TopologyKey
			}
			out = append(out, line)
			walk(g.Children, indent+"  ")
		}
	}
	walk(p.Groups, "")
	return out
}

// TestPlanFor: each kind's mapping, its annotations, conflicts and names.
func TestPlanFor(t *testing.T) {
	seg := map[string]string{topology.AnnotationSegmentSize: "4", topology.AnnotationSegmentTopologyKey: topology.TopologyKeyNVLinkDomain}
	mixedLWS := lwsObj("mixed", nil, 1, 2, "", "")
	lt := podTemplate("default-scheduler", nil)
	_ = unstructured.SetNestedField(mixedLWS.Object, lt, "spec", "leaderWorkerTemplate", "leaderTemplate")
	cases := []struct {
		name     string
		kind     Kind
		obj      *unstructured.Unstructured
		parent   map[string]string
		nsDef    bool
		mode     Mode
		want     []string // nil: no plan
		problems []string // annotations (or "" for the spec) of the problems, in order
		inMsg    string   // part of the first problem's message
		warn     string   // part of the plan's warning
	}{
		{name: "jobset per replicated job", kind: KindJobSet,
			obj:  jobSetObj("train", map[string]string{AnnotationTopologyKey: "rack"}, rj("driver", 1, 1, podTemplate("", nil), nil), rj("workers", 2, 4, podTemplate("", nil), nil)),
			want: []string{"jobset.train.driver 1/1 rack", "jobset.train.workers 8/8 rack"}},
		{name: "jobset replicated job of another scheduler", kind: KindJobSet,
			obj:  jobSetObj("t", nil, rj("cpu", 1, 1, podTemplate("default-scheduler", nil), nil), rj("gpu", 1, 2, podTemplate("", nil), nil)),
			want: []string{"jobset.t.gpu 2/2"}},
		{name: "jobset namespace default", kind: KindJobSet, nsDef: true,
			obj:  jobSetObj("t", nil, rj("w", 1, 2, podTemplate("default-scheduler", nil), nil)),
			want: []string{"jobset.t.w 2/2"}},
		{name: "jobset not ours", kind: KindJobSet, obj: jobSetObj("t", nil, rj("w", 1, 2, podTemplate("default-scheduler", nil), nil))},
		{name: "jobset opted out", kind: KindJobSet, obj: jobSetObj("t", nil, rj("w", 1, 2, withAnnotations(podTemplate("", nil), map[string]string{AnnotationGang: "false"}), nil))},
		{name: "jobset min-count per replicated job", kind: KindJobSet,
			obj:  jobSetObj("t", nil, rj("a", 1, 2, podTemplate("", nil), map[string]string{AnnotationMinCount: "1"}), rj("b", 2, 2, podTemplate("", nil), map[string]string{AnnotationMinCount: "3"})),
			want: []string{"jobset.t.a 2/1", "jobset.t.b 4/3"}},
		{name: "jobset min-count ambiguous", kind: KindJobSet,
			obj:      jobSetObj("t", map[string]string{AnnotationMinCount: "2"}, rj("a", 1, 2, podTemplate("", nil), nil), rj("b", 1, 2, podTemplate("", nil), nil)),
			problems: []string{AnnotationMinCount}, inMsg: "ambiguous with 2 gangs"},
		{name: "trainjob annotations apply", kind: KindJobSet, parent: map[string]string{AnnotationTopologyKey: "rack", AnnotationMinCount: "2"},
			obj:  jobSetObj("tj", nil, rj("node", 1, 4, podTemplate("", nil), nil)),
			want: []string{"jobset.tj.node 4/2 rack"}},
		{name: "jobset beats trainjob", kind: KindJobSet, parent: map[string]string{AnnotationTopologyKey: "rack"},
			obj:  jobSetObj("tj", map[string]string{AnnotationTopologyKey: "leaf"}, rj("node", 1, 4, podTemplate("", nil), nil)),
			want: []string{"jobset.tj.node 4/4 leaf"}},
		{name: "jobset composite", kind: KindJobSet, mode: ModeComposite,
			obj:  jobSetObj("c", nil, rj("init", 1, 1, podTemplate("", nil), nil), withDependsOn(rj("node", 2, 2, podTemplate("", nil), nil), "init")),
			want: []string{"jobset.c 2/1", "  jobset.c.init 1/1", "  jobset.c.node 4/4"}},
		{name: "min-count above size", kind: KindJobSet, obj: jobSetObj("t", map[string]string{AnnotationMinCount: "9"}, rj("w", 2, 4, podTemplate("", nil), nil)),
			problems: []string{AnnotationMinCount}, inMsg: "9 is more than the 8 pods"},
		{name: "min-count not a number", kind: KindJob, obj: jobObj("j", map[string]string{AnnotationMinCount: "all"}, 4, true, ""),
			problems: []string{AnnotationMinCount}, inMsg: `"all" is not a whole number`},
		{name: "segments must divide", kind: KindJob, obj: jobObj("j", seg, 6, true, ""), problems: []string{topology.AnnotationSegmentSize}, inMsg: "6 pods are not a whole number of segments of 4"},
		{name: "segments pass through", kind: KindJob, obj: jobObj("j", seg, 8, true, ""), want: []string{"job.j 8/8"}},
		{name: "segment level is the gang's", kind: KindJob, obj: jobObj("j", merge(seg, map[string]string{AnnotationTopologyKey: topology.TopologyKeyNVLinkDomain}), 8, true, ""),
			problems: []string{topology.AnnotationSegmentTopologyKey}, inMsg: "segments need a level below it"},
		{name: "segment size alone", kind: KindJob, obj: jobObj("j", map[string]string{topology.AnnotationSegmentSize: "4"}, 8, true, ""),
			problems: []string{topology.AnnotationSegmentSize}, inMsg: "set without"},
		{name: "bad rail alignment", kind: KindJob, obj: jobObj("j", map[string]string{topology.AnnotationRailAlignment: "Required"}, 2, true, ""), problems: []string{topology.AnnotationRailAlignment}},
		{name: "bad member-loss policy", kind: KindJob, obj: jobObj("j", map[string]string{vocab.AnnotationOnMemberLoss: "Panic"}, 2, true, ""), problems: []string{vocab.AnnotationOnMemberLoss}},
		{name: "bad topology key", kind: KindJob, obj: jobObj("j", map[string]string{AnnotationTopologyKey: "a b"}, 2, true, ""), problems: []string{AnnotationTopologyKey}},
		{name: "bad disruption mode", kind: KindJob, obj: jobObj("j", map[string]string{AnnotationDisruptionMode: "all"}, 2, true, ""), problems: []string{AnnotationDisruptionMode}},
		{name: "non-indexed job", kind: KindJob, obj: jobObj("j", nil, 4, false, "")},
		{name: "job of another scheduler", kind: KindJob, obj: jobObj("j", nil, 4, true, "default-scheduler")},
		{name: "job of a jobset", kind: KindJob, obj: owned(withLabels(jobObj("j", nil, 4, true, ""), map[string]string{LabelJobSetName: "js", LabelReplicatedJobName: "w"}), "jobset.x-k8s.io/v1alpha2", "JobSet")},
		{name: "job of a jobset without its labels", kind: KindJob, obj: owned(jobObj("j", nil, 4, true, ""), "jobset.x-k8s.io/v1alpha2", "JobSet"), want: []string{"job.j 4/4"}, warn: "lacks the JobSet labels"},
		{name: "job of a scheduler-plugins group", kind: KindJob, obj: withLabels(jobObj("j", nil, 4, true, ""), map[string]string{LabelSchedulerPluginsPodGroup: "pg"})},
		{name: "job with spec.scheduling", kind: KindJob, obj: withField(jobObj("j", nil, 4, true, ""), map[string]any{"schedulingPolicy": map[string]any{}}, "spec", "scheduling")},
		{name: "job too large", kind: KindJob, obj: jobObj("j", nil, MaxGangSize+1, true, ""), problems: []string{""}, inMsg: "at most 10000"},
		{name: "job name too long for a group", kind: KindJob, obj: jobObj(strings.Repeat("j", 250), nil, 2, true, ""), problems: []string{""}, inMsg: "not a valid PodGroup name"},
		{name: "lws groups", kind: KindLeaderWorkerSet, obj: lwsObj("serve", nil, 3, 4, "", ""),
			want: []string{"lws.serve.0 4/4", "lws.serve.1 4/4", "lws.serve.2 4/4"}},
		{name: "lws leader ready", kind: KindLeaderWorkerSet, obj: lwsObj("serve", nil, 1, 4, "LeaderReady", ""), want: []string{"lws.serve.0 4/1"}},
		{name: "lws leader ready min-count", kind: KindLeaderWorkerSet, obj: lwsObj("serve", map[string]string{AnnotationMinCount: "4"}, 1, 4, "LeaderReady", ""),
			problems: []string{AnnotationMinCount}, inMsg: "would wait for ever"},
		{name: "lws mixed schedulers", kind: KindLeaderWorkerSet, obj: mixedLWS, problems: []string{""}, inMsg: "different schedulers"},
		{name: "lws too many groups", kind: KindLeaderWorkerSet, obj: lwsObj("big", nil, MaxGroups+1, 2, "", ""), problems: []string{""}, inMsg: "more than the 512 groups"},
		{name: "ray cluster", kind: KindRayCluster, obj: rayObj("rc", nil, false, rayGroup("gpu", 3, 1, 2), rayGroup("cpu", 1, 0, 1)),
			want: []string{"ray.rc 8/8"}},
		{name: "ray autoscaling", kind: KindRayCluster, obj: rayObj("rc", nil, true, rayGroup("gpu", 3, 1, 2), rayGroup("cpu", 1, 0, 1)),
			want: []string{"ray.rc 8/3"}},
		{name: "rayjob annotations", kind: KindRayCluster, parent: map[string]string{AnnotationTopologyKey: "rack"}, obj: rayObj("rc", nil, false, rayGroup("gpu", 2, 2, 1)),
			want: []string{"ray.rc 3/3 rack"}},
		{name: "ray composite", kind: KindRayCluster, mode: ModeComposite, obj: rayObj("rc", nil, true, rayGroup("gpu", 3, 1, 2), rayGroup("cpu", 1, 0, 1)),
			want: []string{"ray.rc 3/2", "  ray.rc.headgroup 1/1", "  ray.rc.gpu 6/2", "  ray.rc.cpu 1/1"}},
		{name: "scheduler-plugins podgroup", kind: KindSchedulerPluginsPodGroup,
			obj:  obj("scheduling.x-k8s.io/v1alpha1", "PodGroup", "pt", map[string]string{AnnotationTopologyKey: "rack"}, map[string]any{"minMember": int64(4)}),
			want: []string{"sp.pt 4/4 rack"}},
		{name: "volcano min-count conflict", kind: KindVolcanoPodGroup,
			obj:      obj("scheduling.volcano.sh/v1beta1", "PodGroup", "v", map[string]string{AnnotationMinCount: "3"}, map[string]any{"minMember": int64(4)}),
			problems: []string{AnnotationMinCount}, inMsg: "conflicts with spec.minMember 4"},
		{name: "volcano without members", kind: KindVolcanoPodGroup, obj: obj("scheduling.volcano.sh/v1beta1", "PodGroup", "v", nil, map[string]any{}), problems: []string{""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mode := tc.mode
			if mode == "" {
				mode = ModeFlat
			}
			p, err := PlanFor(Input{Kind: tc.kind, Object: tc.obj, ParentAnnotations: tc.parent, NamespaceDefault: tc.nsDef, Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			if p == nil {
				if tc.want != nil || tc.problems != nil {
					t.Fatalf("no plan; want %v, problems %v", tc.want, tc.problems)
				}
				return
			}
			var keys []string
			for _, pr := range p.Problems {
				keys = append(keys, pr.Annotation)
			}
			if !slices.Equal(keys, tc.problems) {
				t.Fatalf("problems %q; want annotations %q", p.Problems, tc.problems)
			}
			if tc.inMsg != "" && !strings.Contains(p.Problems[0].Message, tc.inMsg) {
				t.Errorf("problem %q; want %q in it", p.Problems[0].Message, tc.inMsg)
			}
			if len(tc.problems) > 0 {
				return
			}
			if tc.warn != "" && (len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], tc.warn)) || tc.warn == "" && len(p.Warnings) > 0 {
				t.Errorf("warnings %q; want %q", p.Warnings, tc.warn)
			}
			if got := summary(p); !slices.Equal(got, tc.want) {
				t.Errorf("groups\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range []map[string]string{a, b} {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func withDependsOn(rj map[string]any, on string) map[string]any {
	rj["dependsOn"] = []any{map[string]any{"name": on, "status": "Complete"}}
	return rj
}

func owned(u *unstructured.Unstructured, apiVersion, kind string) *unstructured.Unstructured {
	u.SetOwnerReferences(nil)
	refs := []any{map[string]any{"apiVersion": apiVersion, "kind": kind, "name": "owner", "uid": "owner-uid", "controller": true}}
	_ = unstructured.SetNestedSlice(u.Object, refs, "metadata", "ownerReferences")
	return u
}

func withField(u *unstructured.Unstructured, v map[string]any, path ...string) *unstructured.Unstructured {
	_ = unstructured.SetNestedMap(u.Object, v, path...)
	return u
}

// withLabels sets the pod template's labels of a Job.
func withLabels(u *unstructured.Unstructured, labels map[string]string) *unstructured.Unstructured {
	m := map[string]any{}
	for k, v := range labels {
		m[k] = v
	}
	_ = unstructured.SetNestedMap(u.Object, m, "spec", "template", "metadata", "labels")
	return u
}
