package grouping

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
)

// PodCase is one pod's labels and annotations with the group it must
// name; the integration test replays the same table on the real apiserver.
type podCase struct {
	name        string
	mode        Mode
	labels      map[string]string
	annotations map[string]string
	want        string
}

func podCases() []podCase {
	long := strings.Repeat("a", 63)
	return []podCase{
		{name: "jobset", labels: map[string]string{LabelJobSetName: "train", LabelReplicatedJobName: "workers", LabelJobName: "train-workers-0", LabelJobCompletionIndex: "3"}, want: "jobset.train.workers"},
		{name: "jobset without replicated job", labels: map[string]string{LabelJobSetName: "train", LabelJobName: "j", LabelJobCompletionIndex: "0"}, want: ""},
		{name: "lws", labels: map[string]string{LabelLWSName: "serve", LabelLWSGroupIndex: "2", LabelLWSWorkerIndex: "1"}, want: "lws.serve.2"},
		{name: "ray", labels: map[string]string{LabelRayCluster: "rc", LabelRayGroup: "gpu", LabelRayNodeType: "worker"}, want: "ray.rc"},
		{name: "ray composite", mode: ModeComposite, labels: map[string]string{LabelRayCluster: "rc", LabelRayGroup: "headgroup"}, want: "ray.rc.headgroup"},
		{name: "indexed job", labels: map[string]string{LabelJobName: "llm.train", LabelJobCompletionIndex: "0"}, want: "job.llm.train"},
		{name: "non-indexed job", labels: map[string]string{LabelJobName: "plain"}, want: ""},
		{name: "scheduler-plugins", labels: map[string]string{LabelSchedulerPluginsPodGroup: "pg1", LabelRayCluster: "rc"}, want: "sp.pg1"},
		{name: "scheduler-plugins old label", labels: map[string]string{LabelSchedulerPluginsPodGroupOld: "pg0"}, want: "sp.pg0"},
		{name: "volcano beats jobset", labels: map[string]string{LabelJobSetName: "a", LabelReplicatedJobName: "b"}, annotations: map[string]string{AnnotationVolcanoGroupName: "ray-rc-pg"}, want: "volcano.ray-rc-pg"},
		{name: "volcano label is not read", labels: map[string]string{AnnotationVolcanoGroupName: "x"}, want: ""},
		{name: "empty value skips the rule", labels: map[string]string{LabelSchedulerPluginsPodGroup: "", LabelLWSName: "l", LabelLWSGroupIndex: "0"}, want: "lws.l.0"},
		{name: "uppercase is no name", labels: map[string]string{LabelRayCluster: "Ray"}, want: ""},
		{name: "underscore is no name", labels: map[string]string{LabelJobSetName: "a_b", LabelReplicatedJobName: "w"}, want: ""},
		{name: "long parts fit", labels: map[string]string{LabelJobSetName: long, LabelReplicatedJobName: long}, want: "jobset." + long + "." + long},
		{name: "opted out", labels: map[string]string{LabelLWSName: "l", LabelLWSGroupIndex: "0"}, annotations: map[string]string{AnnotationGang: "false"}, want: ""},
		{name: "opt-out is exact", labels: map[string]string{LabelLWSName: "l", LabelLWSGroupIndex: "0"}, annotations: map[string]string{AnnotationGang: "False"}, want: "lws.l.0"},
		{name: "plain pod", labels: map[string]string{"app": "x"}, want: ""},
	}
}

// PodCasesForAPIServer exports the table for the integration test, as
// (mode, labels, annotations, want) rows.
func TestGroupOfPod(t *testing.T) {
	for _, tc := range podCases() {
		t.Run(tc.name, func(t *testing.T) {
			mode := tc.mode
			if mode == "" {
				mode = ModeFlat
			}
			got, _, ok := GroupOfPod(mode, tc.labels, tc.annotations)
			if ok != (tc.want != "") || ok && got != tc.want {
				t.Errorf("GroupOfPod = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}

// celProgram compiles the policy's group variable, valid variable and
// opt-out condition with cel-go, object as a dynamic map: the same
// expressions the apiserver runs (the integration test checks them there).
func celProgram(t *testing.T, mode Mode) func(labels, annotations map[string]string) (string, bool) {
	t.Helper()
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType), cel.Variable("variables", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	spec := PodGroupPolicy(mode)
	compile := func(expr string) cel.Program {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("compile %s: %v", expr, iss.Err())
		}
		p, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	group, valid := compile(spec.Variables[0].Expression), compile(spec.Variables[1].Expression)
	optedOut := compile(spec.Variables[2].Expression)
	return func(labels, annotations map[string]string) (string, bool) {
		meta := map[string]any{}
		if labels != nil {
			meta["labels"] = labels
		}
		if annotations != nil {
			meta["annotations"] = annotations
		}
		obj := map[string]any{"metadata": meta}
		in := map[string]any{"object": obj}
		if v, _, err := optedOut.Eval(in); err != nil {
			t.Fatalf("opt-out: %v", err)
		} else if v.Value().(bool) {
			return "", false
		}
		g, _, err := group.Eval(in)
		if err != nil {
			t.Fatalf("group: %v", err)
		}
		name := g.Value().(string)
		v, _, err := valid.Eval(map[string]any{"object": obj, "variables": map[string]any{"group": name}})
		if err != nil {
			t.Fatalf("valid: %v", err)
		}
		return name, v.Value().(bool)
	}
}

// TestPolicyAgreesWithGo: the generated CEL names the same group as
// GroupOfPod for the table and for 5,000 random label sets drawn from the
// keys the rules read and values valid or not.
func TestPolicyAgreesWithGo(t *testing.T) {
	for _, mode := range []Mode{ModeFlat, ModeComposite} {
		eval := celProgram(t, mode)
		check := func(name string, labels, annotations map[string]string) {
			want, _, wantOK := GroupOfPod(mode, labels, annotations)
			got, ok := eval(labels, annotations)
			if ok != wantOK || ok && got != want {
				t.Errorf("%s %s: CEL %q valid %v, Go %q valid %v (labels %v, annotations %v)", mode, name, got, ok, want, wantOK, labels, annotations)
			}
		}
		for _, tc := range podCases() {
			if tc.mode == "" || tc.mode == mode {
				check(tc.name, tc.labels, tc.annotations)
			}
		}
		var keys []Source
		for _, r := range PodRules(mode) {
			keys = append(keys, r.Parts...)
			if r.Require != "" {
				keys = append(keys, Source{Key: r.Require})
			}
		}
		keys = append(keys, Source{Key: AnnotationGang, Annotation: true})
		values := []string{"", "a", "w-1", "0", "12", "A", "x_y", "false", "a.b", strings.Repeat("z", 63), "-a", "é"}
		r := rand.New(rand.NewPCG(1, 2))
		for i := range 5000 {
			labels, annotations := map[string]string{}, map[string]string{}
			for _, k := range keys {
				if r.IntN(3) > 0 {
					continue
				}
				m := labels
				if k.Annotation {
					m = annotations
				}
				m[k.Key] = values[r.IntN(len(values))]
			}
			check(fmt.Sprint("random ", i), labels, annotations)
		}
	}
}
