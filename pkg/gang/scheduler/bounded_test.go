package scheduler

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// writtenMessages records the messages a scheduler writes through a fake
// clientset: PodGroup conditions, pod-status conditions, event notes.
type writtenMessages struct {
	mu                           sync.Mutex
	conditions, podStatus, notes []string
}

func (w *writtenMessages) watch(client *fake.Clientset) {
	client.PrependReactor("*", "*", func(act k8stesting.Action) (bool, runtime.Object, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		switch a := act.(type) {
		case k8stesting.PatchAction:
			if a.GetResource().Resource == "pods" && a.GetSubresource() == "status" {
				var p struct {
					Status struct{ Conditions []v1.PodCondition } `json:"status"`
				}
				if json.Unmarshal(a.GetPatch(), &p) == nil {
					for _, c := range p.Status.Conditions {
						w.podStatus = append(w.podStatus, c.Message)
					}
				}
			}
		case k8stesting.CreateAction: // and updates: the same methods
			switch o := a.GetObject().(type) {
			case *schedulingv1beta1.PodGroup:
				for _, c := range o.Status.Conditions {
					w.conditions = append(w.conditions, c.Message)
				}
			case *eventsv1.Event:
				w.notes = append(w.notes, o.Note)
			}
		}
		return false, nil, nil
	})
}

// counts returns how many of each were written.
func (w *writtenMessages) counts() (int, int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.conditions), len(w.podStatus), len(w.notes)
}

// TestMessagesBounded: a PodGroup annotation the scheduler parses, set to
// a 256 KiB invalid value, is refused with messages that stay within the
// bounds wherever they are written: the PodGroup's condition and each
// waiting member's PodScheduled condition (report.MaxMessage; the value
// itself is quoted cut short), the events (report.MaxNote).
func TestMessagesBounded(t *testing.T) {
	huge := strings.Repeat("x", 256<<10-100)
	for _, annotation := range []string{
		topology.AnnotationPreferredTopologyKey,
		topology.AnnotationRailAlignment,
		topology.AnnotationTopologySpread,
	} {
		t.Run(annotation, func(t *testing.T) {
			pg := &schedulingv1beta1.PodGroup{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g", UID: "uid-g", Annotations: map[string]string{annotation: huge}},
				Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
					Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}}},
			}
			objs := []runtime.Object{pg}
			for _, name := range []string{"g-0", "g-1"} {
				objs = append(objs, &v1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
					Spec: v1.PodSpec{SchedulerName: topology.SchedulerName, SchedulingGroup: &v1.PodSchedulingGroup{PodGroupName: ptr.To("g")},
						Containers: []v1.Container{{Name: "c", Image: "i"}}},
					Status: v1.PodStatus{Phase: v1.PodPending},
				})
			}
			client := fake.NewClientset(objs...)
			var w writtenMessages
			w.watch(client)
			s, err := New(Config{Client: client, RecordNamespace: "gpufabric-system"})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			deadline := time.Now().Add(10 * time.Second)
			for c, p, n := w.counts(); time.Now().Before(deadline) && (c == 0 || p < 2 || n == 0); c, p, n = w.counts() {
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if len(w.conditions) == 0 || len(w.podStatus) < 2 || len(w.notes) == 0 {
				t.Fatalf("written: %d conditions, %d pod statuses, %d events; want the refusal in each", len(w.conditions), len(w.podStatus), len(w.notes))
			}
			for what, msgs := range map[string][]string{"condition": w.conditions, "pod status": w.podStatus, "event": w.notes} {
				limit := report.MaxMessage
				if what == "event" {
					limit = report.MaxNote
				}
				longest := 0
				for _, m := range msgs {
					longest = max(longest, len(m))
				}
				t.Logf("%s: %d written, the longest %d bytes", what, len(msgs), longest)
				for _, m := range msgs {
					if len(m) > limit || !strings.Contains(m, annotation) {
						t.Errorf("%s message of %d bytes (limit %d), want the refusal naming %s: %.200s", what, len(m), limit, annotation, m)
					}
				}
			}
		})
	}
}
