package inspect

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/queue"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// TestWaitingQueueOrder: waiting PodGroups are numbered as the scheduler's
// queue serves them (priority, then older, then key); priority is
// spec.priority capped at its lowest member's, else the lowest member's;
// placed groups are not counted; explain of a waiting group shows its
// place.
func TestWaitingQueueOrder(t *testing.T) {
	waiting := cond(vocab.ConditionInitiallyScheduled, metav1.ConditionFalse, "Unschedulable", "no room")
	b := newBuilder()
	b.group("team-a", "old-low", 2, waiting).created("team-a", "old-low", time.Hour, ptr.To[int32](10))
	b.group("team-b", "new-high", 2, waiting).created("team-b", "new-high", time.Minute, ptr.To[int32](100))
	b.group("team-a", "new-low", 2, waiting).created("team-a", "new-low", time.Minute, ptr.To[int32](10))
	b.group("team-c", "same-time", 2, waiting).created("team-c", "same-time", time.Minute, ptr.To[int32](10))
	// No spec.priority: the lowest member's.
	b.group("team-a", "from-pods", 2, waiting).created("team-a", "from-pods", 2*time.Hour, nil)
	for i, prio := range []int32{50, 20} {
		b.pod("team-a", fmt.Sprintf("from-pods-%d", i), "from-pods", "", nil)
		b.c.Pods[len(b.c.Pods)-1].Spec.Priority = ptr.To(prio)
	}
	b.pod("team-a", "from-pods-2", "from-pods", "a-0", nil)
	b.c.Pods[len(b.c.Pods)-1].Spec.Priority = ptr.To[int32](30)
	// A PodGroup asks for 1000, its pod was admitted at 10: it ranks at 10.
	b.group("team-b", "capped", 1, waiting).created("team-b", "capped", 30*time.Minute, ptr.To[int32](1000))
	b.pod("team-b", "capped-0", "capped", "", nil)
	b.c.Pods[len(b.c.Pods)-1].Spec.Priority = ptr.To[int32](10)
	b.group("team-a", "placed", 2, cond(vocab.ConditionInitiallyScheduled, metav1.ConditionTrue, "Scheduled", "placed")).
		created("team-a", "placed", 3*time.Hour, ptr.To[int32](1000))

	rep, err := BuildStatus(b.c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, w := range rep.Waiting {
		got[w.Namespace+"/"+w.Name] = fmt.Sprintf("#%d prio %d age %s", w.Position, w.Priority, testNow.Sub(w.Created))
	}
	want := map[string]string{
		"team-b/new-high":  "#1 prio 100 age 1m0s",
		"team-a/from-pods": "#2 prio 20 age 2h0m0s",
		"team-a/old-low":   "#3 prio 10 age 1h0m0s",
		"team-b/capped":    "#4 prio 10 age 30m0s",
		"team-a/new-low":   "#5 prio 10 age 1m0s", // same rank as team-c/same-time: key order
		"team-c/same-time": "#6 prio 10 age 1m0s",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("waiting:\n got %v\nwant %v", got, want)
	}

	ex, err := BuildExplain(b.c, Options{}, "team-a", "old-low", 0)
	if err != nil {
		t.Fatal(err)
	}
	if q := ex.Queue; q == nil || q.Position != 3 || q.Of != 6 || q.Priority != 10 || !q.Created.Equal(testNow.Add(-time.Hour)) {
		t.Errorf("explain queue %+v, want 3 of 6, priority 10, created 1h ago", q)
	}
	if ex, _ := BuildExplain(b.c, Options{}, "team-a", "placed", 0); ex.Queue != nil {
		t.Errorf("placed group has a queue place %+v", ex.Queue)
	}
}

// TestQueueOrderIsTheScheduler's: queueBefore agrees with the scheduler's
// queue.Rank.Before on the PodGroup keys, for ties of every kind.
func TestQueueOrderIsTheSchedulers(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var gangs []WaitingGang
	for i := range 60 {
		gangs = append(gangs, WaitingGang{
			Namespace: []string{"a", "a-b", "b"}[r.IntN(3)], Name: fmt.Sprintf("g%d", i%7),
			Priority: int32(r.IntN(3)), Created: testNow.Add(-time.Duration(r.IntN(3)) * time.Minute),
		})
	}
	for i := range gangs {
		for j := range gangs {
			a, b := &gangs[i], &gangs[j]
			want := queue.Rank{Priority: a.Priority, Since: a.Created}.Before(vocab.PodGroupKey(a.Namespace, a.Name),
				queue.Rank{Priority: b.Priority, Since: b.Created}, vocab.PodGroupKey(b.Namespace, b.Name))
			if got := queueBefore(a, b); got != want {
				t.Fatalf("queueBefore(%+v, %+v) = %v, the scheduler says %v", *a, *b, got, want)
			}
		}
	}
}
