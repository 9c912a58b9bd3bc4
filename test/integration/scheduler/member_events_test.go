package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestSchedulerMemberEvents: a waiting member pod of a refused gang has
// one FailedScheduling event that points to its PodGroup (so `kubectl
// describe pod` says why it waits), however often the gang is refused
// with the same message; not a series of them (the events library would
// aggregate repeats into one event's series: the test wants no repeat at
// all). When the PodGroup's message changes, each member gets one more. A
// gang still gathering members tells each of its pods so once, with a
// Normal WaitingForMembers event.
func TestSchedulerMemberEvents(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true})
	ctx := t.Context()
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, []string{"a"}, 2, 4)
	const ns, group, members = "member-events", "g", 2
	itest.GangNamespace(t, admin, ns, 1)
	// Short backoffs: the refused gang is tried again every few hundred ms.
	startScheduler(t, schedulerClient(t, cp, "gpufabric-scheduler"), scheduler.Config{
		InitialBackoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, MaxUnschedulableWait: 200 * time.Millisecond,
	})
	pg := itest.TemplateGroup(ns, group, members)
	pg.Annotations = map[string]string{topology.AnnotationRailAlignment: "maybe"}
	_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	for i := range members {
		_, err := admin.CoreV1().Pods(ns).Create(ctx, itest.TemplatePod(ns, fmt.Sprintf("%s-%d", group, i), group), metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
	}

	// Several refusals with the same message: the PodGroup's own events
	// count two or more (the events library makes repeats a series), then
	// more time passes (about five attempts a second).
	itest.Poll(t, "the gang refused more than once", 30*time.Second, func(ctx context.Context) error {
		evs, err := memberEventsAbout(ctx, admin, ns, group)
		if err != nil {
			return err
		}
		n := 0
		for _, e := range evs {
			n++
			if e.Series != nil {
				n += int(e.Series.Count) - 1
			}
		}
		if n < 2 {
			return fmt.Errorf("the PodGroup's FailedScheduling events: %d, want 2 or more", n)
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	checkMemberEvents(t, admin, ns, group, members, []string{`value "maybe" is not one of`})

	// Another message: one more event per member.
	cur, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, group, metav1.GetOptions{})
	itest.Must(t, "get podgroup", err)
	cur.Annotations[topology.AnnotationRailAlignment] = "sometimes"
	_, err = admin.SchedulingV1beta1().PodGroups(ns).Update(ctx, cur, metav1.UpdateOptions{})
	itest.Must(t, "update podgroup", err)
	itest.Poll(t, "the new message", 30*time.Second, func(ctx context.Context) error {
		pg, err := admin.SchedulingV1beta1().PodGroups(ns).Get(ctx, group, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := findCondition(pg); c == nil || !strings.Contains(c.Message, `"sometimes"`) {
			return fmt.Errorf("condition %+v", c)
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	checkMemberEvents(t, admin, ns, group, members, []string{`value "maybe" is not one of`, `value "sometimes" is not one of`})

	// A gang with two of its three members waits for the third.
	_, err = admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, itest.TemplateGroup(ns, "short", 3), metav1.CreateOptions{})
	itest.Must(t, "create podgroup", err)
	for i := range 2 {
		_, err := admin.CoreV1().Pods(ns).Create(ctx, itest.TemplatePod(ns, fmt.Sprintf("short-%d", i), "short"), metav1.CreateOptions{})
		itest.Must(t, "create pod", err)
	}
	itest.Poll(t, "each waiting member told once", 30*time.Second, func(ctx context.Context) error {
		for i := range 2 {
			pod := fmt.Sprintf("short-%d", i)
			evs, err := eventsAbout(ctx, admin, ns, pod, vocab.ReasonWaitingForMembers)
			if err != nil {
				return err
			}
			if len(evs) != 1 || evs[0].Type != "Normal" || evs[0].Series != nil ||
				!strings.Contains(evs[0].Note, "PodGroup short: WaitingForMembers: ") || !strings.Contains(evs[0].Note, "2 of minCount 3 members exist") {
				return fmt.Errorf("pod %s: %d WaitingForMembers events %+v, want one", pod, len(evs), evs)
			}
		}
		return nil
	})
}

// checkMemberEvents: each member of group has exactly one
// FailedScheduling event per message in wants (in no series), each
// pointing to the PodGroup.
func checkMemberEvents(t *testing.T, c kubernetes.Interface, ns, group string, members int, wants []string) {
	t.Helper()
	itest.Poll(t, "each member's events", 30*time.Second, func(ctx context.Context) error {
		for i := range members {
			pod := fmt.Sprintf("%s-%d", group, i)
			evs, err := memberEventsAbout(ctx, c, ns, pod)
			if err != nil {
				return err
			}
			var notes []string
			for _, e := range evs {
				notes = append(notes, e.Note)
				if e.Type != "Warning" || e.Series != nil || e.DeprecatedCount > 1 ||
					!strings.Contains(e.Note, "PodGroup "+group+": Unschedulable: ") ||
					!strings.Contains(e.Note, "kubectl gpufabric explain "+group+" -n "+ns) {
					return fmt.Errorf("pod %s: event %s %q (series %v, count %d): want one Warning pointing to the PodGroup", pod, e.Type, e.Note, e.Series, e.DeprecatedCount)
				}
			}
			if len(evs) != len(wants) {
				return fmt.Errorf("pod %s: %d FailedScheduling events %q, want %d", pod, len(evs), notes, len(wants))
			}
			for _, w := range wants {
				n := 0
				for _, note := range notes {
					if strings.Contains(note, w) {
						n++
					}
				}
				if n != 1 {
					return fmt.Errorf("pod %s: %d events with %q, want 1; notes %q", pod, n, w, notes)
				}
			}
		}
		return nil
	})
}

// memberEventsAbout lists the FailedScheduling events about the object
// named name in ns.
func memberEventsAbout(ctx context.Context, c kubernetes.Interface, ns, name string) ([]eventsv1.Event, error) {
	return eventsAbout(ctx, c, ns, name, vocab.EventFailedScheduling)
}

// eventsAbout lists the events with reason about the object named name in
// ns.
func eventsAbout(ctx context.Context, c kubernetes.Interface, ns, name, reason string) ([]eventsv1.Event, error) {
	list, err := c.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out, nil
}
