package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufabric/gpufabric/pkg/gang/evict"
	"github.com/gpufabric/gpufabric/pkg/gang/membership"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/replace"
	"github.com/gpufabric/gpufabric/pkg/gang/report"
)

var _ evict.Gangs = (*gangPods)(nil)

// gangPods reads gangs' pods from the pod informer's indexes (by PodGroup,
// by node) and the node lister. The loop, the gang status and the rank
// read members through it; it serves the evict room as evict.Gangs.
type gangPods struct {
	pods  cache.Indexer
	nodes corelisters.NodeLister
	// classify says whether a bound member is lost to a trigger
	// (replace.Replacer.Classify); nil: never.
	classify func(*v1.Pod, *v1.Node) (*replace.Loss, time.Duration)
	guard    *membership.Guard // a grouper's PodGroup's members (nil: all)
	// previous is where a gang restarted whole ran (the replace room);
	// nil: nowhere known.
	previous previousDomains
}

// previousDomains is the replace room's memory of where gangs restarted
// whole ran, and whether their policy keeps them there
// (replace.Replacer).
type previousDomains interface {
	Prefer(key string) []string
	Stays(key string, pg *schedulingv1beta1.PodGroup) string
}

var _ previousDomains = (*replace.Replacer)(nil)

// memberSet is what a PodGroup's pods say about its gang.
type memberSet struct {
	// pending members to place: ours, unbound, not terminating, without
	// scheduling gates (a gated pod is never placed nor counted).
	pending []*v1.Pod
	gated   []*v1.Pod
	// anyBound: a member was bound before (the gang was placed); the
	// pending ones are late members.
	anyBound bool
	// running members: bound, not finished, not terminating, on a node that
	// exists; boundNodes are their nodes, sorted, without duplicates.
	running    []*v1.Pod
	boundNodes []string
	// lost describes bound members that do not run: failed, terminating,
	// or on a deleted node, or lost to a trigger (losses, which hold the
	// terminating ones on a lost node too: those count as gone).
	lost   []string
	losses []replace.Loss
	// recheck: a member is lost, or a pod may turn out a member, this soon
	// if nothing changes (0: none).
	recheck time.Duration
	// leaf: the PodGroup is a tree's leaf; wholeAbove: the key of the
	// CompositePodGroup above it whose disruptionMode is All ("" none).
	// The loop sets them for the replace room (replace.Turn).
	leaf       bool
	wholeAbove string
}

// members reads a PodGroup's pods from the informers.
func (g *gangPods) members(pg *schedulingv1beta1.PodGroup) (*memberSet, error) {
	objs, err := g.pods.ByIndex(podGroupIndex, pg.Namespace+"/"+pg.Name)
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	ms := &memberSet{}
	nodes := map[string]bool{}
	for _, o := range objs {
		p, ok := o.(*v1.Pod)
		if !ok || !podstate.Ours(p) {
			continue
		}
		if member, recheck := g.guard.Admit(pg, p); !member {
			ms.soon(recheck) // its owner may reach the informers yet
			continue
		}
		switch {
		case p.Spec.NodeName != "":
			ms.anyBound = true
			if p.Status.Phase == v1.PodSucceeded {
				continue
			}
			if why, gone := g.lostReason(pg, ms, p); why != "" || gone {
				if !gone {
					ms.lost = append(ms.lost, why)
				}
				continue
			}
			ms.running = append(ms.running, p)
			nodes[p.Spec.NodeName] = true
		case p.DeletionTimestamp != nil || podstate.Terminated(p):
		case len(p.Spec.SchedulingGates) > 0:
			ms.gated = append(ms.gated, p)
		default:
			ms.pending = append(ms.pending, p)
		}
	}
	ms.boundNodes = slices.Sorted(maps.Keys(nodes))
	ms.lost = sortedLost(ms.lost)
	return ms, nil
}

// soon has ms looked at again within d (d 0: no change).
func (ms *memberSet) soon(d time.Duration) {
	if d > 0 && (ms.recheck == 0 || d < ms.recheck) {
		ms.recheck = d
	}
}

// lostReason says why a bound member does not run, "" when it does; gone
// when it counts neither as running nor as lost: terminating on a lost
// node, or failed before its replacement ran (replace.Handled). It notes
// ms's losses.
func (g *gangPods) lostReason(pg *schedulingv1beta1.PodGroup, ms *memberSet, p *v1.Pod) (string, bool) {
	node, err := g.nodes.Get(p.Spec.NodeName)
	if err != nil {
		node = nil
	}
	if g.classify != nil {
		loss, recheck := g.classify(p, node)
		switch {
		case loss != nil && replace.Handled(pg, loss):
			return "", true
		case loss != nil:
			ms.losses = append(ms.losses, *loss)
			if p.DeletionTimestamp != nil {
				return "", true
			}
		default:
			ms.soon(recheck)
		}
		if loss != nil && p.Status.Phase != v1.PodFailed {
			return loss.Why, false
		}
	}
	switch {
	case p.Status.Phase == v1.PodFailed:
		return fmt.Sprintf("%s failed (%s)", p.Name, report.Truncate(strings.TrimSpace(p.Status.Reason+" "+p.Status.Message), report.MaxQuoted)), false
	case p.DeletionTimestamp != nil:
		return p.Name + " terminating", false
	case node == nil:
		return fmt.Sprintf("%s on deleted node %s", p.Name, p.Spec.NodeName), false
	}
	return "", false
}

// nodeLost reports whether p's node is lost (evict.Config.NodeLost).
func (g *gangPods) nodeLost(p *v1.Pod) bool {
	node, err := g.nodes.Get(p.Spec.NodeName)
	if err != nil {
		node = nil
	}
	loss, _ := g.classify(p, node)
	return loss != nil && loss.Trigger != replace.PodFailed
}

// sortedLost sorts the lost members' descriptions.
func sortedLost(lost []string) []string {
	slices.Sort(lost)
	return lost
}

// forgetOld drops from ms what a whole-gang restart left behind once no
// old member runs (evict.Restarter): finished or failed old members no
// longer make the new members late ones.
func forgetOld(ms *memberSet) {
	ms.anyBound = len(ms.running) > 0
	ms.lost = nil
}

// GroupPods lists a PodGroup's pods, whatever their state.
func (g *gangPods) GroupPods(namespace, name string) ([]*v1.Pod, error) {
	return indexedPods(g.pods, podGroupIndex, namespace+"/"+name)
}

// NodePods lists the pods bound to a node.
func (g *gangPods) NodePods(node string) ([]*v1.Pod, error) {
	return indexedPods(g.pods, nodeIndex, node)
}

// Waiting lists a PodGroup's pending members.
func (g *gangPods) Waiting(pg *schedulingv1beta1.PodGroup) ([]*v1.Pod, error) {
	ms, err := g.members(pg)
	if err != nil {
		return nil, err
	}
	return ms.pending, nil
}

// indexedPods lists the pods of the pod informer's index under value.
func indexedPods(pods cache.Indexer, index, value string) ([]*v1.Pod, error) {
	objs, err := pods.ByIndex(index, value)
	if err != nil {
		return nil, err
	}
	out := make([]*v1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*v1.Pod); ok {
			out = append(out, p)
		}
	}
	return out, nil
}
