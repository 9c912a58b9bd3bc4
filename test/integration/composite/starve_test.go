package composite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestCompositeStarvation: a tree that needs a whole rack (two 4-GPU
// pods in one NVLink domain, rack r0 or r1, each with one node taken by a
// single pod) waits past the starvation bound (2 s) and reserves a rack,
// as a flat gang does: of two single pods of its priority that arrive
// next, one takes the free node of the other rack and the other is
// refused naming the reservation (without it, both free nodes are taken
// and the tree starves for ever); once the reserved rack's single pod
// ends, the tree is placed there.
func TestCompositeStarvation(t *testing.T) {
	cp, admin := startPlane(t, []node{
		{name: "a-0", domain: "a", rack: "r0"}, {name: "a-1", domain: "a", rack: "r0"},
		{name: "c-0", domain: "c", rack: "r1"}, {name: "c-1", domain: "c", rack: "r1"},
	})
	const ns = "starve"
	itest.GangNamespace(t, admin, ns, 4)
	startScheduler(t, cp, "gpufabric-scheduler", func(c *scheduler.Config) { c.StarvationBound = 2 * time.Second })
	single(t, admin, ns, "s-0", "a-0")
	single(t, admin, ns, "s-1", "c-0")
	waitBound(t, admin, ns, 2)

	tr := tree{ns: ns, name: "big", key: rackLabel, min: 1, leaves: []leaf{{name: "shard", key: keyNVL, min: 2, pods: 2}}}
	tr.create(t, admin)
	reserved := ""
	itest.Poll(t, "the starving tree reserves a rack", 30*time.Second, func(ctx context.Context) error {
		for _, rack := range []string{"r0", "r1"} {
			if eventOn(ctx, admin, ns, tr.name, vocab.EventReserved, rackLabel+" "+rack) == nil {
				reserved = rack
				return nil
			}
		}
		return fmt.Errorf("no %s event on %s yet", vocab.EventReserved, tr.name)
	})
	free, blocker := "a-1", "s-0" // the reserved rack's free node and its single pod
	if reserved == "r1" {
		free, blocker = "c-1", "s-1"
	}
	t.Logf("the tree reserved %s (free node %s)", reserved, free)

	single(t, admin, ns, "late-0", "")
	single(t, admin, ns, "late-1", "")
	var where map[string]string
	itest.Poll(t, "one late single pod placed, outside the reserved rack", 30*time.Second, func(ctx context.Context) error {
		var err error
		if where, err = placement(ctx, admin, ns); err != nil {
			return err
		}
		if where["late-0"] == "" && where["late-1"] == "" {
			return fmt.Errorf("no late pod bound: %v", where)
		}
		return nil
	})
	time.Sleep(2 * time.Second) // the other one's attempts come and go
	where, err := placement(t.Context(), admin, ns)
	itest.Must(t, "placement", err)
	for _, p := range []string{"late-0", "late-1"} {
		if where[p] == free {
			t.Errorf("%s took %s, the free node of the rack the tree reserved: %v", p, free, where)
		}
	}
	waiting := "late-0"
	if where["late-0"] != "" {
		waiting = "late-1"
	}
	itest.Poll(t, waiting+" refused naming the reservation", 20*time.Second, func(ctx context.Context) error {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, waiting, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && strings.Contains(c.Message, "reserved for a starving gang of this namespace") {
				return nil
			}
		}
		return fmt.Errorf("%s conditions %+v", waiting, p.Status.Conditions)
	})

	itest.Must(t, "delete the reserved rack's single pod", admin.CoreV1().Pods(ns).Delete(t.Context(), blocker, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	itest.Poll(t, "the tree placed in the rack it reserved", 60*time.Second, func(ctx context.Context) error {
		where, err := placement(ctx, admin, ns)
		if err != nil {
			return err
		}
		got := []string{where["shard-0"], where["shard-1"]}
		slices.Sort(got)
		want := map[string][]string{"r0": {"a-0", "a-1"}, "r1": {"c-0", "c-1"}}[reserved]
		if !slices.Equal(got, want) {
			return fmt.Errorf("shards on %v, want %v", got, want)
		}
		return nil
	})
}

// single creates a pod of no gang with its own 4-GPU claim, on node
// ("": wherever the scheduler puts it).
func single(t *testing.T, admin kubernetes.Interface, ns, name, node string) {
	t.Helper()
	p := itest.TemplatePod(ns, name, "")
	p.Spec.SchedulingGroup = nil
	p.Spec.ResourceClaims = p.Spec.ResourceClaims[1:] // no fabric channel
	p.Spec.Containers[0].Resources.Claims = p.Spec.Containers[0].Resources.Claims[1:]
	if node != "" {
		p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	}
	_, err := admin.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	itest.Must(t, "create pod "+name, err)
}
