package composite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// TestCompositeTrees runs on one control plane with the CompositePodGroup
// gate: racks r0 (NVLink domains a: 2 nodes, b: 1 node labelled
// role=eval) and r1 (c: 2 nodes, d: 2 nodes, e: 1 node), 4 GPUs a node.
func TestCompositeTrees(t *testing.T) {
	cp, admin := startPlane(t, []node{
		{name: "a-0", domain: "a", rack: "r0"}, {name: "a-1", domain: "a", rack: "r0"},
		{name: "b-0", domain: "b", rack: "r0", labels: map[string]string{"role": "eval"}},
		{name: "c-0", domain: "c", rack: "r1"}, {name: "c-1", domain: "c", rack: "r1"},
		{name: "d-0", domain: "d", rack: "r1"}, {name: "d-1", domain: "d", rack: "r1"},
		{name: "e-0", domain: "e", rack: "r1"},
		{name: "f-0", domain: "f", rack: "r2"}, {name: "f-1", domain: "f", rack: "r2"},
	})
	for _, ns := range []string{"trap", "waits", "invalid"} {
		itest.GangNamespace(t, admin, ns, 4)
	}
	itest.GangNamespace(t, admin, "late", 2)
	itest.GangNamespace(t, admin, "channel", 4)
	startScheduler(t, cp, "gpufabric-scheduler", func(c *scheduler.Config) { c.DomainChannels = 4 })
	t.Run("greedy dead end", func(t *testing.T) { greedyDeadEnd(t, admin) })
	t.Run("waits for its members", func(t *testing.T) { waitsForMembers(t, admin) })
	t.Run("invalid tree", func(t *testing.T) { invalidTree(t, admin) })
	t.Run("late member", func(t *testing.T) { lateMember(t, admin) })
	t.Run("a leaf's PodGroup claim", func(t *testing.T) { leafClaim(t, admin) })
}

// leafClaim: a leaf PodGroup with a claim of its own (a fabric-domain
// channel from a template, made by kube-controller-manager for the
// PodGroup, named by its pods): the tree is placed in rack r2 (the only
// free NVLink domain of two nodes, dom-f); the channel is allocated in
// dom-f and reserved for the leaf PodGroup, as a flat gang's.
func leafClaim(t *testing.T, admin kubernetes.Interface) {
	tr := tree{ns: "channel", name: "tp", key: rackLabel, min: 1, leaves: []leaf{
		{name: "shard", key: keyNVL, min: 2, pods: 2, channel: true},
	}}
	tr.create(t, admin)
	where := waitBound(t, admin, tr.ns, 2)
	if where["shard-0"][0] != 'f' || where["shard-1"][0] != 'f' {
		t.Errorf("placed %v, want dom-f", where)
	}
	itest.Poll(t, "the leaf's channel allocated and reserved for it", 20*time.Second, func(ctx context.Context) error {
		pg, err := admin.SchedulingV1beta1().PodGroups(tr.ns).Get(ctx, "shard", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(pg.Status.ResourceClaimStatuses) != 1 || pg.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			return fmt.Errorf("claim statuses %+v", pg.Status.ResourceClaimStatuses)
		}
		c, err := admin.ResourceV1().ResourceClaims(tr.ns).Get(ctx, *pg.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 1 || !strings.Contains(c.Status.Allocation.Devices.Results[0].Pool, "dom-f") {
			return fmt.Errorf("claim %s allocation %+v", c.Name, c.Status.Allocation)
		}
		if len(c.Status.ReservedFor) != 1 || c.Status.ReservedFor[0].Resource != "podgroups" || c.Status.ReservedFor[0].UID != pg.UID {
			return fmt.Errorf("claim %s reserved for %+v, want the PodGroup", c.Name, c.Status.ReservedFor)
		}
		return nil
	})
}

// greedyDeadEnd: a tree in one rack of "encode" (one 4-GPU pod in one
// NVLink domain) and "eval" (one 4-GPU pod that only role=eval nodes take:
// b-0). Tried first (its name sorts first, at equal demand), encode takes
// the domain that fits it best, dom-b, and eval then fits nowhere: the
// greedy sibling order dead-ends. The tree is placed as one decision all
// the same: encode in dom-a, eval on b-0, both in r0; each leaf's
// condition is True and the root has the Scheduled event.
func greedyDeadEnd(t *testing.T, admin kubernetes.Interface) {
	tr := tree{ns: "trap", name: "job", key: rackLabel, min: 2, leaves: []leaf{
		{name: "encode", key: keyNVL, min: 1, pods: 1},
		{name: "eval", min: 1, pods: 1, selector: map[string]string{"role": "eval"}},
	}}
	tr.create(t, admin)
	where := waitBound(t, admin, tr.ns, 2)
	if where["encode-0"] != "a-0" && where["encode-0"] != "a-1" || where["eval-0"] != "b-0" {
		t.Errorf("placed %v, want encode in dom-a and eval on b-0", where)
	}
	itest.Poll(t, "leaf conditions and the root's event", 20*time.Second, func(ctx context.Context) error {
		for _, l := range tr.leaves {
			if err := conditionIs(ctx, admin, tr.ns, l.name, metav1.ConditionTrue, "placed 1 pods"); err != nil {
				return err
			}
		}
		return eventOn(ctx, admin, tr.ns, tr.name, vocab.EventScheduled, rackLabel+" r0")
	})
	// Its pods' later events find nothing waiting: the tree is not tried
	// (and refused) again.
	time.Sleep(2 * time.Second)
	if err := eventOn(t.Context(), admin, tr.ns, tr.name, vocab.EventFailedScheduling, ""); err == nil {
		t.Error("the placed tree was refused afterwards")
	}
}

// waitsForMembers: a tree of two leaves of minCount 2, only one pod each
// at first: nothing is placed (a tree is placed whole or not at all), the
// pods say what the tree waits for; with the second pods it is placed.
func waitsForMembers(t *testing.T, admin kubernetes.Interface) {
	tr := tree{ns: "waits", name: "svc", key: rackLabel, min: 2, leaves: []leaf{
		{name: "prefill", key: keyNVL, min: 2, pods: 1},
		{name: "decode", key: keyNVL, min: 2, pods: 1},
	}}
	tr.create(t, admin)
	itest.Poll(t, "pods told what the tree waits for", 20*time.Second, func(ctx context.Context) error {
		p, err := admin.CoreV1().Pods(tr.ns).Get(ctx, "prefill-0", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Reason == vocab.ReasonWaitingForMembers && strings.Contains(c.Message, "of minCount 2 pods") {
				return nil
			}
		}
		return fmt.Errorf("prefill-0 conditions %+v", p.Status.Conditions)
	})
	if where, err := placement(t.Context(), admin, tr.ns); err != nil || where["prefill-0"] != "" || where["decode-0"] != "" {
		t.Fatalf("a tree short of members was placed: %v %v", where, err)
	}
	for _, l := range tr.leaves {
		createPod(t, admin, tr.ns, l, 1)
	}
	where := waitBound(t, admin, tr.ns, 4)
	// r0 has one free node left (the trap took the others): both leaves
	// go to r1, each in an NVLink domain of its own 2 nodes (c or d).
	for _, l := range tr.leaves {
		a, b := where[l.name+"-0"], where[l.name+"-1"]
		if a == "" || b == "" || a[0] != b[0] || (a[0] != 'c' && a[0] != 'd') {
			t.Errorf("%s on %s and %s: want one NVLink domain of rack r1 (c or d); all: %v", l.name, a, b, where)
		}
	}
}

// invalidTree: a tree of minGroupCount 2 whose second leaf names another
// Workload than its root: the tree is refused naming spec.workloadRef,
// nothing is placed.
func invalidTree(t *testing.T, admin kubernetes.Interface) {
	tr := tree{ns: "invalid", name: "mixed", min: 2, leaves: []leaf{
		{name: "ok", min: 1, pods: 1},
		{name: "other", min: 1, pods: 1, workload: "someone-else"},
	}}
	tr.create(t, admin)
	itest.Poll(t, "refused naming the field", 30*time.Second, func(ctx context.Context) error {
		return eventOn(ctx, admin, tr.ns, tr.name, vocab.EventFailedScheduling, "spec.workloadRef")
	})
	if where, err := placement(t.Context(), admin, tr.ns); err != nil || where["ok-0"] != "" {
		t.Errorf("a pod of an invalid tree was placed: %v %v", where, err)
	}
}

// lateMember: a placed tree's leaf (pods of 2 GPUs) gets a new pod: it
// joins its leaf's NVLink domain, where the tree's running member pins it.
func lateMember(t *testing.T, admin kubernetes.Interface) {
	tr := tree{ns: "late", name: "grow", key: rackLabel, min: 1, leaves: []leaf{
		{name: "workers", key: keyNVL, min: 1, pods: 1},
	}}
	tr.create(t, admin)
	first := waitBound(t, admin, tr.ns, 1)["workers-0"]
	createPod(t, admin, tr.ns, tr.leaves[0], 1)
	where := waitBound(t, admin, tr.ns, 2)
	if where["workers-1"][0] != first[0] {
		t.Errorf("late member on %s, its leaf runs on %s: want the same NVLink domain", where["workers-1"], first)
	}
}
