package memberevents

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	"github.com/gpufabric/gpufabric/pkg/gang/report"
)

func memberPods(n int) []*v1.Pod {
	pods := make([]*v1.Pod, n)
	for i := range pods {
		pods[i] = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("p-%d", i), UID: types.UID(fmt.Sprintf("uid-%d", i))}}
	}
	return pods
}

// TestMemberEventsPick: a member is told a gang's note once however often
// the gang is retried with it; a changed note (reason or message), a note
// past Refresh, or a forgotten gang tells again; new members
// get the note they missed; a note reaches at most PerChange
// members of a 10,000-pod gang; bound members are not told; gangs do not
// share what was told.
func TestMemberEventsPick(t *testing.T) {
	refused := Note{EventType: v1.EventTypeWarning, Reason: "FailedScheduling", Why: "Unschedulable", Message: "no room"}
	other := refused
	other.Message = "no room in domain b"
	waiting := Note{EventType: v1.EventTypeNormal, Reason: "WaitingForMembers", Why: "WaitingForMembers", Message: "no room"}
	three, big := memberPods(3), memberPods(10000)
	bound := memberPods(2)
	bound[1].Spec.NodeName = "n"
	var m Events
	t0 := time.Unix(1000, 0)
	for i, tc := range []struct {
		key    string
		note   Note
		pods   []*v1.Pod
		at     time.Duration
		forget bool
		want   int
	}{
		{key: "pg:ns/a", note: refused, pods: three[:2], want: 2},
		{key: "pg:ns/a", note: refused, pods: three[:2], at: time.Second},
		{key: "pg:ns/a", note: refused, pods: three[:2], at: time.Minute},
		{key: "pg:ns/a", note: refused, pods: three, at: time.Minute, want: 1}, // a new member
		{key: "pg:ns/a", note: other, pods: three, at: 2 * time.Minute, want: 3},
		{key: "pg:ns/a", note: other, pods: three, at: 3 * time.Minute},
		{key: "pg:ns/a", note: waiting, pods: three, at: 3 * time.Minute, want: 3}, // same message, another reason
		{key: "pg:ns/a", note: waiting, pods: three, at: 3*time.Minute + Refresh - time.Nanosecond},
		{key: "pg:ns/a", note: waiting, pods: three, at: 3*time.Minute + Refresh, want: 3},
		{key: "pg:ns/a", note: waiting, pods: three, at: 4*time.Minute + Refresh, forget: true, want: 3},
		{key: "pg:ns/b", note: refused, pods: bound, want: 1},
		{key: "pg:ns/big", note: refused, pods: big, want: PerChange},
		{key: "pg:ns/big", note: refused, pods: big, at: time.Second},
		{key: "pg:ns/big", note: other, pods: big, at: 2 * time.Second, want: PerChange},
	} {
		if tc.forget {
			m.Forget(tc.key)
		}
		if got := m.pick(tc.key, tc.note, tc.pods, t0.Add(tc.at)); len(got) != tc.want {
			t.Errorf("step %d (%s, %q at %v): %d pods told, want %d", i, tc.key, tc.note.Message, tc.at, len(got), tc.want)
		}
	}
	if r := m.gangs["pg:ns/big"]; len(r.told) > PerChange {
		t.Errorf("a 10,000-pod gang remembers %d members, want at most %d", len(r.told), PerChange)
	}
}

// TestMemberEventNote: the note names the PodGroup, its reason, the
// command that explains it, and cuts the PodGroup's message short.
func TestMemberEventNote(t *testing.T) {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "train"}}
	note := eventNote(pg, Note{Why: "Unschedulable", Message: strings.Repeat("x", 5000)})
	for _, want := range []string{"PodGroup train: Unschedulable: ", "kubectl gpufabric explain train -n team", "PodGroupInitiallyScheduled", "x..."} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q: want %q", note, want)
		}
	}
	if len(note) > noteMessageMax+300 {
		t.Errorf("note is %d bytes: the PodGroup's message was not cut", len(note))
	}
}

// BenchmarkMemberEventsTell: the worker's cost of telling a 10,000-pod
// gang's members, a changed note each time (the worst case: every call
// starts a round and records PerChange events), through the
// scheduler's kind of recorder (an events broadcaster sending to a fake
// clientset's sink) to measure that recording does not wait on the API.
func BenchmarkMemberEventsTell(b *testing.B) {
	pods := memberPods(10000)
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "big"}}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: fake.NewClientset().EventsV1()})
	broadcaster.StartRecordingToSink(b.Context().Done())
	defer broadcaster.Shutdown()
	m := Events{report: report.New(broadcaster.NewRecorder(scheme.Scheme, "bench"))}
	for i := 0; b.Loop(); i++ {
		m.Tell("pg:ns/big", pg, Note{EventType: v1.EventTypeWarning, Reason: "FailedScheduling", Why: "Unschedulable", Message: fmt.Sprint(i)}, pods)
	}
}
