package replace

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func member(name, node string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}, Spec: v1.PodSpec{NodeName: node},
		Status: v1.PodStatus{Phase: v1.PodRunning}}
}

func node(name string, ready v1.ConditionStatus, since time.Time, taints ...v1.Taint) *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{Taints: taints},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(since)}}}}
}

func noExecute(key string, added time.Time) v1.Taint {
	return v1.Taint{Key: key, Effect: v1.TaintEffectNoExecute, TimeAdded: ptr.To(metav1.NewTime(added))}
}

// TestClassify: each trigger makes a member lost at its time (from the
// objects), a node not ready shorter than the grace or a taint still
// tolerated does not yet and says when it would; healthy members are
// never lost.
func TestClassify(t *testing.T) {
	grace := 30 * time.Second
	now := t0.Add(time.Minute)
	failed := member("f", "n1")
	failed.Status.Phase = v1.PodFailed
	failed.Status.ContainerStatuses = []v1.ContainerStatus{{State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{FinishedAt: metav1.NewTime(t0.Add(5 * time.Second))}}}}
	gcFailed := member("g", "n1")
	gcFailed.Status.Phase = v1.PodFailed
	gcFailed.Status.Conditions = []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))},
		{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(7 * time.Second))}}
	tolerating := func(seconds *int64) *v1.Pod {
		p := member("t", "n1")
		p.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: seconds}}
		return p
	}
	for _, tc := range []struct {
		name      string
		pod       *v1.Pod
		node      *v1.Node
		deletedAt time.Time
		want      Trigger
		since     time.Time
		recheck   time.Duration
	}{
		{name: "healthy", pod: member("a", "n1"), node: node("n1", v1.ConditionTrue, t0)},
		{name: "node without conditions", pod: member("a", "n1"), node: &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}},
		{name: "not ready past the grace", pod: member("a", "n1"), node: node("n1", v1.ConditionFalse, t0), want: NodeNotReady, since: t0.Add(grace)},
		{name: "unknown past the grace", pod: member("a", "n1"), node: node("n1", v1.ConditionUnknown, t0.Add(30*time.Second)), want: NodeNotReady, since: t0.Add(time.Minute)},
		{name: "kubelet never posted", pod: member("a", "n1"), node: func() *v1.Node {
			n := node("n1", v1.ConditionUnknown, t0)
			n.Status.Conditions[0].Reason = "NodeStatusNeverUpdated"
			return n
		}()},
		{name: "not ready within the grace", pod: member("a", "n1"), node: node("n1", v1.ConditionFalse, t0.Add(50*time.Second)), recheck: 20 * time.Second},
		{name: "untolerated NoExecute taint", pod: member("a", "n1"), node: node("n1", v1.ConditionTrue, t0, noExecute("example.com/broken", t0.Add(10*time.Second))),
			want: NodeTainted, since: t0.Add(10 * time.Second)},
		{name: "NoSchedule taint", pod: member("a", "n1"), node: node("n1", v1.ConditionTrue, t0, v1.Taint{Key: "x", Effect: v1.TaintEffectNoSchedule})},
		{name: "tolerated forever", pod: tolerating(nil), node: node("n1", v1.ConditionTrue, t0, noExecute(v1.TaintNodeUnreachable, t0))},
		{name: "tolerated for 300s", pod: tolerating(ptr.To[int64](300)), node: node("n1", v1.ConditionTrue, t0, noExecute(v1.TaintNodeUnreachable, t0)), recheck: 240 * time.Second},
		{name: "toleration run out", pod: tolerating(ptr.To[int64](30)), node: node("n1", v1.ConditionTrue, t0, noExecute(v1.TaintNodeUnreachable, t0)),
			want: NodeTainted, since: t0.Add(30 * time.Second)},
		{name: "node deleted, time known", pod: member("a", "gone"), deletedAt: t0, want: NodeDeleted, since: t0},
		{name: "node deleted, time unknown", pod: member("a", "gone"), want: NodeDeleted},
		{name: "pod failed", pod: failed, node: node("n1", v1.ConditionTrue, t0), want: PodFailed, since: t0.Add(5 * time.Second)},
		{name: "pod failed, no container finished", pod: gcFailed, node: node("n1", v1.ConditionTrue, t0), want: PodFailed, since: t0.Add(7 * time.Second)},
		{name: "pod failed on a deleted node", pod: failed, deletedAt: t0.Add(3 * time.Second), want: NodeDeleted, since: t0.Add(3 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loss, recheck := Classify(grace, tc.pod, tc.node, tc.deletedAt, now)
			switch {
			case tc.want == "" && loss != nil:
				t.Fatalf("lost (%s: %s), want not", loss.Trigger, loss.Why)
			case tc.want != "" && loss == nil:
				t.Fatalf("not lost, want %s", tc.want)
			case loss != nil && (loss.Trigger != tc.want || !loss.Since.Equal(tc.since) || loss.Pod != tc.pod || loss.Why == ""):
				t.Errorf("lost %s since %s (%q), want %s since %s", loss.Trigger, loss.Since, loss.Why, tc.want, tc.since)
			}
			if recheck != tc.recheck {
				t.Errorf("recheck in %s, want %s", recheck, tc.recheck)
			}
		})
	}
}

// TestDeletions: a deletion is remembered until the node comes back, and
// the memory stays bounded.
func TestDeletions(t *testing.T) {
	var d Deletions
	d.Deleted("n1", t0)
	if got := d.At("n1"); !got.Equal(t0) {
		t.Errorf("at %s, want %s", got, t0)
	}
	d.Added("n1")
	if got := d.At("n1"); !got.IsZero() {
		t.Errorf("a node that came back is still deleted at %s", got)
	}
	last := 3 * maxDeletions
	for i := range last {
		d.Deleted(fmt.Sprintf("n-%d", i), t0.Add(time.Duration(i)*time.Second))
	}
	if len(d.m) > maxDeletions {
		t.Errorf("%d deletions remembered, want at most %d", len(d.m), maxDeletions)
	}
	if d.At(fmt.Sprintf("n-%d", last-1)).IsZero() {
		t.Error("the newest deletion was dropped")
	}
}
