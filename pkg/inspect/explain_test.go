package inspect

import (
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

func TestBuildExplainPlaced(t *testing.T) {
	got, err := BuildExplain(scenario().c, testLevels, "team-a", "train", 10)
	if err != nil {
		t.Fatal(err)
	}
	gpus := func(node string) []string {
		return []string{node + "/gpu-0", node + "/gpu-1", node + "/gpu-2", node + "/gpu-3"}
	}
	want := &ExplainReport{
		Namespace: "team-a", Name: "train", State: StatePlaced,
		Summary:  "2 of 2 members bound (minCount 2) in NVLink domain dom-a",
		MinCount: 2, TopologyKey: topology.TopologyKeyNVLinkDomain, Job: "llm-train",
		Levels:     []string{topology.TopologyKeyNVLinkDomain, rackKey, leafKey},
		Conditions: []Condition{{Type: vocab.ConditionInitiallyScheduled, Status: "True", Reason: "Scheduled", Message: "placed 2 pods in gpufabric.dev/nvlinkDomain dom-a"}},
		Members: []MemberInfo{
			{Rank: "0", Pod: "train-x7k2p", Node: "a-1", Placement: []string{"dom-a", "rack-1", "leaf-1"}, Phase: "Pending", Devices: gpus("a-1"), Rails: []int64{0, 1, 2, 3}},
			{Rank: "1", Pod: "train-m4q9z", Node: "a-0", Placement: []string{"dom-a", "rack-1", "leaf-1"}, Phase: "Pending", Devices: gpus("a-0"), Rails: []int64{0, 1, 2, 3}},
		},
		SharedClaims: []ClaimInfo{{Name: "train-fabric", Entry: "fabric", Devices: []string{"fabric-domain.dom-a/channel-0"}, ReservedFor: []string{"podgroups/train"}}},
		Events: []EventInfo{{Type: "Normal", Reason: "Scheduled", Note: "placed 2 pods in gpufabric.dev/nvlinkDomain dom-a", Count: 1,
			LastSeen: testNow.Add(-5 * time.Minute), From: topology.SchedulerName}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("explain (-want +got):\n%s", diff)
	}
}

func TestBuildExplainStates(t *testing.T) {
	tests := []struct {
		name, ns, group string
		change          func(b *builder)
		state, summary  string
		check           func(t *testing.T, r *ExplainReport)
	}{{
		name: "waiting with a gated member", ns: "team-b", group: "big",
		state: StateWaiting, summary: "0 of 4 members bound (minCount 3); 3 pending; 1 gated",
		check: func(t *testing.T, r *ExplainReport) {
			if m := r.Members[3]; m.Pod != "big-3" || fmt.Sprint(m.Gates) != "[example.com/quota]" || m.Scheduled.Reason != "SchedulingGated" {
				t.Errorf("gated member %+v", m)
			}
			if c := r.Conditions[0]; c.Reason != "Unschedulable" || c.Message != bigMessage {
				t.Errorf("condition %+v, want the multi-line Unschedulable message", c)
			}
			if e := r.Events; len(e) != 1 || e[0].Count != 3 || !e[0].LastSeen.Equal(testNow.Add(-30*time.Second)) {
				t.Errorf("events %+v, want the series of 3, last 30s ago", e)
			}
			if c := r.SharedClaims; len(c) != 1 || c[0].Name != "big-fabric" || c[0].Devices != nil {
				t.Errorf("shared claims %+v, want big-fabric not allocated", c)
			}
		},
	}, {
		name: "not found lists the pods that name it", ns: "team-b", group: "ghost",
		state: StateNotFound, summary: "PodGroup team-b/ghost does not exist; 1 pod names it",
		check: func(t *testing.T, r *ExplainReport) {
			if len(r.Members) != 1 || r.Members[0].Scheduled.Reason != "PodGroupNotFound" {
				t.Errorf("members %+v, want ghost-0 with PodGroupNotFound", r.Members)
			}
		},
	}, {
		name: "members lost", ns: "team-a", group: "train",
		change: func(b *builder) {
			b.c.PodGroups[0].Status.Conditions = append(b.c.PodGroups[0].Status.Conditions,
				cond(vocab.ConditionMembersLost, metav1.ConditionTrue, "MembersLost", "1 of 2 members remain running (minCount 2); lost: train-m4q9z on deleted node a-0; below minCount"))
			b.c.Nodes = b.c.Nodes[1:]
		},
		state: StateMembersLost, summary: "2 of 2 members bound (minCount 2) in NVLink domain dom-a",
		check: func(t *testing.T, r *ExplainReport) {
			if m := r.Members[1]; m.Node != "a-0" || fmt.Sprint(m.Placement) != "[  ]" {
				t.Errorf("member on a deleted node: %+v, want node a-0 in no domain", m)
			}
		},
	}, {
		name: "failed by its member-loss policy", ns: "team-a", group: "train",
		change: func(b *builder) {
			b.c.PodGroups[0].Status.Conditions = append(b.c.PodGroups[0].Status.Conditions,
				cond(vocab.ConditionMembersLost, metav1.ConditionTrue, "NoReplacement", "1 of 2 members remain running"),
				cond(vocab.ConditionFailed, metav1.ConditionTrue, "NoReplacement", "no replacement was placed within 1m0s of the loss"))
		},
		state: StateFailed, summary: "2 of 2 members bound (minCount 2) in NVLink domain dom-a",
	}, {
		name: "segments", ns: "team-a", group: "train",
		change: func(b *builder) {
			b.c.PodGroups[0].Annotations = map[string]string{topology.AnnotationSegmentSize: "16", topology.AnnotationSegmentTopologyKey: topology.TopologyKeyNVLinkDomain}
		},
		state: StatePlaced, summary: "2 of 2 members bound (minCount 2) in NVLink domain dom-a",
		check: func(t *testing.T, r *ExplainReport) {
			if want := "16 members each in one gpufabric.dev/nvlinkDomain"; r.Segments != want {
				t.Errorf("segments %q, want %q", r.Segments, want)
			}
		},
	}, {
		name: "invalid segments", ns: "team-a", group: "train",
		change: func(b *builder) {
			b.c.PodGroups[0].Annotations = map[string]string{topology.AnnotationSegmentSize: "16"}
		},
		state: StatePlaced, summary: "2 of 2 members bound (minCount 2) in NVLink domain dom-a",
		check: func(t *testing.T, r *ExplainReport) {
			if !strings.HasPrefix(r.Segments, "invalid: annotation gpufabric.dev/segment-size is set without") {
				t.Errorf("segments %q, want why they are invalid", r.Segments)
			}
		},
	}, {
		name: "being deleted", ns: "team-b", group: "big",
		change: func(b *builder) { b.c.PodGroups[1].DeletionTimestamp = ptr.To(metav1.Now()) },
		state:  StateDeleting, summary: "0 of 4 members bound (minCount 3); 3 pending; 1 gated",
	}, {
		name: "events saying the same merge", ns: "team-b", group: "big",
		change: func(b *builder) {
			b.event("team-b", "big", corev1.EventTypeWarning, "FailedScheduling", strings.ReplaceAll(bigMessage, "\n", " "), 1, 10*time.Second)
		},
		state: StateWaiting, summary: "0 of 4 members bound (minCount 3); 3 pending; 1 gated",
		check: func(t *testing.T, r *ExplainReport) {
			if e := r.Events; len(e) != 1 || e[0].Count != 4 || !e[0].LastSeen.Equal(testNow.Add(-10*time.Second)) {
				t.Errorf("events %+v, want one of count 3+1, last 10s ago", e)
			}
		},
	}, {
		name: "events: other kinds and namespaces left out, newest kept, oldest first", ns: "team-b", group: "big",
		change: func(b *builder) {
			for i := range 12 {
				b.event("team-b", "big", corev1.EventTypeWarning, "FailedScheduling", fmt.Sprintf("try %d", i), 1, time.Duration(100-i)*time.Minute)
			}
			b.event("team-c", "big", corev1.EventTypeWarning, "Other", "other namespace", 1, 0)
			b.event("team-b", "big", corev1.EventTypeWarning, "Other", "about a pod", 1, 0)
			b.c.Events[len(b.c.Events)-1].Regarding.Kind = "Pod"
		},
		state: StateWaiting, summary: "0 of 4 members bound (minCount 3); 3 pending; 1 gated",
		check: func(t *testing.T, r *ExplainReport) {
			var notes []string
			for _, e := range r.Events {
				notes = append(notes, e.Note)
			}
			want := "try 3,try 4,try 5,try 6,try 7,try 8,try 9,try 10,try 11"
			if got := strings.Join(notes[:9], ","); got != want || !strings.HasPrefix(notes[9], "needs 3 pods") {
				t.Errorf("events %q, want %s then the 30s-old one", notes, want)
			}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := scenario()
			if tc.change != nil {
				tc.change(b)
			}
			r, err := BuildExplain(b.c, testLevels, tc.ns, tc.group, 10)
			if err != nil {
				t.Fatal(err)
			}
			if r.State != tc.state || r.Summary != tc.summary {
				t.Errorf("state %q, summary %q; want %q, %q", r.State, r.Summary, tc.state, tc.summary)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

func TestBuildGroups(t *testing.T) {
	b := scenario()
	b.c.PodGroups[0].Status.Conditions = append(b.c.PodGroups[0].Status.Conditions,
		cond(vocab.ConditionMembersLost, metav1.ConditionTrue, "MembersLost", "1 of 2 members remain running"))
	got, err := BuildGroups(b.c, testLevels)
	if err != nil {
		t.Fatal(err)
	}
	want := &GroupSummary{Groups: []GroupLine{
		{Namespace: "team-a", Name: "train", State: StateMembersLost, Job: "llm-train", MinCount: 2, Members: 2, Bound: 2,
			Domains: []string{"dom-a"}, Reason: "MembersLost", Message: "1 of 2 members remain running"},
		{Namespace: "team-b", Name: "big", State: StateWaiting, MinCount: 3, Members: 4, Gated: 1, Reason: "Unschedulable", Message: bigMessage},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("groups (-want +got):\n%s", diff)
	}
	// Failed by its member-loss policy: the line says so with the Failed
	// condition's words.
	b.c.PodGroups[0].Status.Conditions = append(b.c.PodGroups[0].Status.Conditions,
		cond(vocab.ConditionFailed, metav1.ConditionTrue, "NoReplacement", "no replacement was placed within 1m0s"))
	got, err = BuildGroups(b.c, testLevels)
	if err != nil {
		t.Fatal(err)
	}
	if l := got.Groups[0]; l.State != StateFailed || l.Reason != "NoReplacement" || l.Message != "no replacement was placed within 1m0s" {
		t.Errorf("failed group's line %+v", l)
	}
}

func TestRank(t *testing.T) {
	tests := []struct {
		name   string
		pod    string
		labels map[string]string
		want   string
	}{
		{"indexed job", "train-abcde", map[string]string{LabelJobCompletionIndex: "7"}, "7"},
		{"jobset", "js-w-1-3-xyz", map[string]string{LabelJobSetGlobalIndex: "1", LabelJobCompletionIndex: "3"}, "1/3"},
		{"leaderworkerset", "lws-2-1", map[string]string{LabelLWSGroupIndex: "2", LabelLWSWorkerIndex: "1"}, "2/1"},
		{"kubeflow", "pt-worker-0", map[string]string{LabelKubeflowType: "Worker", LabelKubeflowIndex: "0"}, "worker/0"},
		{"statefulset", "db-4", map[string]string{LabelPodIndex: "4"}, "4"},
		{"ray head", "rc-head-x7k2p", map[string]string{LabelRayNodeType: "head"}, "0"},
		{"ray worker", "rc-gpu-worker-q2z9w", map[string]string{LabelRayNodeType: "worker", LabelRayReplicaIndex: "3"}, "1/3"},
		{"numeric name suffix", "train-12", nil, "12"},
		{"no rank", "train-abcde", nil, ""},
		{"worker index without group", "lws-x", map[string]string{LabelLWSWorkerIndex: "1"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.pod, Labels: tc.labels}}
			if got := Rank(p); got != tc.want {
				t.Errorf("Rank = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRankLess(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"2", "10", true}, {"10", "2", false}, {"1/9", "1/10", true}, {"master/0", "worker/0", true},
		{"3", "", true}, {"", "3", false}, {"", "", false}, {"1", "1/0", true}, {"1", "1", false},
	}
	for _, tc := range tests {
		if got := rankLess(tc.a, tc.b); got != tc.want {
			t.Errorf("rankLess(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
