package replace

import (
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
)

// Trigger is what made a member lost; its values are the metric's trigger
// label values.
type Trigger string

// The triggers.
const (
	NodeNotReady Trigger = "node_not_ready"
	NodeTainted  Trigger = "node_tainted"
	NodeDeleted  Trigger = "node_deleted"
	PodFailed    Trigger = "pod_failed"
	// DeviceTaint: a device taint manager deleted a member (the evict
	// room's whole-gang restart); counted, never classified here.
	DeviceTaint Trigger = "device_taint"
)

// Triggers lists every trigger, for the metric's series.
var Triggers = []Trigger{NodeNotReady, NodeTainted, NodeDeleted, PodFailed, DeviceTaint}

// Loss is one member lost to a trigger.
type Loss struct {
	Pod     *v1.Pod
	Trigger Trigger
	// Since is when the member was lost (the trigger's time plus its
	// grace); zero when no object says (a node deleted before this
	// scheduler started): the caller's fallback applies.
	Since time.Time
	// Why says it in words, for conditions and events.
	Why string
}

// Classify says whether the bound member p, on node (nil: deleted), is
// lost at now, and if not, how long until it would be on what is known
// now (0: never). deletedAt is when node was deleted, zero if unknown.
func Classify(grace time.Duration, p *v1.Pod, node *v1.Node, deletedAt, now time.Time) (*Loss, time.Duration) {
	switch {
	case node == nil: // before Failed: pod GC fails the pods of a deleted node
		return &Loss{Pod: p, Trigger: NodeDeleted, Since: deletedAt, Why: fmt.Sprintf("%s on deleted node %s", p.Name, p.Spec.NodeName)}, 0
	case p.Status.Phase == v1.PodFailed:
		return &Loss{Pod: p, Trigger: PodFailed, Since: failedAt(p), Why: fmt.Sprintf("%s failed", p.Name)}, 0
	}
	var recheck time.Duration
	if c := readyCondition(node); c != nil && c.Status != v1.ConditionTrue && c.Reason != reasonNeverUpdated {
		at := c.LastTransitionTime.Add(grace)
		if !now.Before(at) {
			return &Loss{Pod: p, Trigger: NodeNotReady, Since: at,
				Why: fmt.Sprintf("%s on node %s, Ready=%s since %s", p.Name, node.Name, c.Status, c.LastTransitionTime.UTC().Format(time.RFC3339))}, 0
		}
		recheck = at.Sub(now)
	}
	for i := range node.Spec.Taints {
		t := &node.Spec.Taints[i]
		if t.Effect != v1.TaintEffectNoExecute {
			continue
		}
		at, tolerated := untoleratedAt(p, t, now)
		if tolerated {
			continue
		}
		if !now.Before(at) {
			return &Loss{Pod: p, Trigger: NodeTainted, Since: at, Why: fmt.Sprintf("%s on node %s, tainted %s:NoExecute", p.Name, node.Name, t.Key)}, 0
		}
		if d := at.Sub(now); recheck == 0 || d < recheck {
			recheck = d
		}
	}
	return nil, recheck
}

// untoleratedAt returns when the NoExecute taint t stops being tolerated
// by p, as the taint manager counts it (the shortest tolerationSeconds of
// the tolerations that match it, from its timeAdded), or tolerated=true
// when a matching toleration has no limit.
func untoleratedAt(p *v1.Pod, t *v1.Taint, now time.Time) (time.Time, bool) {
	added := now
	if t.TimeAdded != nil {
		added = t.TimeAdded.Time
	}
	var least *int64
	matched := false
	for i := range p.Spec.Tolerations {
		tol := &p.Spec.Tolerations[i]
		if !tol.ToleratesTaint(logr.Discard(), t, false) { // logs only for comparison operators, off here
			continue
		}
		if tol.TolerationSeconds == nil {
			return time.Time{}, true
		}
		matched = true
		if least == nil || *tol.TolerationSeconds < *least {
			least = tol.TolerationSeconds
		}
	}
	if !matched {
		return added, false
	}
	return added.Add(time.Duration(max(*least, 0)) * time.Second), false
}

// reasonNeverUpdated is kube-controller-manager's Ready=Unknown reason for
// a node whose kubelet never posted its status: the members bound there
// never started, so they are not lost to it (nodes without a kubelet are
// test fixtures; kwok and virtual kubelets post status).
const reasonNeverUpdated = "NodeStatusNeverUpdated"

// readyCondition is node's Ready condition, nil when it has none (a node
// that never reported is not lost for that).
func readyCondition(node *v1.Node) *v1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == v1.NodeReady {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// failedAt is when a failed pod failed: the latest time a container
// finished, else the last transition of its Ready=False or
// DisruptionTarget=True condition, else zero (unknown).
func failedAt(p *v1.Pod) time.Time {
	var at time.Time
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.FinishedAt.After(at) {
			at = t.FinishedAt.Time
		}
	}
	if at.IsZero() {
		for _, c := range p.Status.Conditions {
			if (c.Type == v1.PodReady && c.Status == v1.ConditionFalse || c.Type == v1.DisruptionTarget && c.Status == v1.ConditionTrue) && c.LastTransitionTime.After(at) {
				at = c.LastTransitionTime.Time
			}
		}
	}
	return at
}

// maxDeletions bounds the deleted nodes remembered; past it the oldest
// half is dropped (their members fall back to the MembersLost
// condition's time, as after a restart).
const maxDeletions = 8192

// Deletions remembers when nodes were deleted (the node informer's
// events), until a node of the same name comes back. The zero value is
// ready; safe for concurrent use.
type Deletions struct {
	mu sync.Mutex
	m  map[string]time.Time
}

// Deleted notes node deleted at.
func (d *Deletions) Deleted(node string, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]time.Time{}
	}
	if len(d.m) >= maxDeletions {
		d.pruneLocked()
	}
	d.m[node] = at
}

// pruneLocked drops the entries not newer than the mean time.
func (d *Deletions) pruneLocked() {
	var sum time.Duration
	var first time.Time
	for _, t := range d.m {
		if first.IsZero() {
			first = t
		}
		sum += t.Sub(first) / time.Duration(len(d.m))
	}
	mid := first.Add(sum)
	for n, t := range d.m {
		if !t.After(mid) {
			delete(d.m, n)
		}
	}
}

// Added forgets a node that exists (again).
func (d *Deletions) Added(node string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.m, node)
}

// At is when node was deleted, zero if unknown.
func (d *Deletions) At(node string) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.m[node]
}
