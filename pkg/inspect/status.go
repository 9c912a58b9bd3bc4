package inspect

import (
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// ReasonPending is the reason of a WaitingGang that has no
// PodGroupInitiallyScheduled condition yet and all of its members; one that
// lacks members says vocab.ReasonWaitingForMembers, as the scheduler does.
const ReasonPending = "Pending"

// BuildStatus reports the occupancy of every domain of every level of the
// fabric tree (domains without GPUs or channels are left out), the whole
// cluster, and the PodGroups that wait.
func BuildStatus(c *Cluster, opts Options) (*StatusReport, error) {
	ix, err := newIndex(c, opts)
	if err != nil {
		return nil, err
	}
	rep := &StatusReport{Levels: []LevelStatus{}}
	rep.Warnings = append(slices.Clone(c.Warnings), ix.tree.Warnings...)
	for _, l := range ix.tree.Levels {
		if l.Key == topology.TopologyKeyCluster {
			for _, d := range l.Domains {
				rep.Cluster = ix.domainStatus(d)
			}
			continue
		}
		rep.Levels = append(rep.Levels, ix.levelStatus(l))
	}
	if rep.Spares, err = spareStatus(ix, opts.Spares); err != nil {
		return nil, err
	}
	rep.Waiting = waitingGangs(c, ix)
	return rep, nil
}

func (ix *index) levelStatus(l *topology.Level) LevelStatus {
	ls := LevelStatus{Key: l.Key, Domains: []DomainStatus{}}
	labelled := 0
	for _, d := range l.Domains {
		labelled += len(d.Nodes)
		ds := ix.domainStatus(d)
		if ds.GPUs.Total == 0 && ds.Channels.Total == 0 {
			ls.NodesWithoutGPUs += len(d.Nodes)
			continue
		}
		ls.Domains = append(ls.Domains, ds)
	}
	if l.Index > 0 {
		ls.NodesWithoutLabel = len(ix.nodeNames) - labelled
	}
	return ls
}

// domainStatus counts the GPUs of a domain's nodes and the channels of the
// NVLink domains its nodes are in, and who holds them.
func (ix *index) domainStatus(d *topology.Domain) DomainStatus {
	ds := DomainStatus{ID: d.ID, Nodes: len(d.Nodes)}
	uses := map[GangRef]*GangUse{}
	use := func(h GangRef) *GangUse {
		if uses[h] == nil {
			uses[h] = &GangUse{GangRef: h}
		}
		return uses[h]
	}
	level0 := ix.tree.Levels[0]
	seen := map[string]bool{}
	for _, n := range d.Nodes {
		for _, g := range ix.gpus(n) {
			ix.count(&ds.GPUs, g)
			if h, ok := ix.holder[g.key()]; ok {
				use(h).GPUs++
			}
		}
		nv := level0.DomainOf(n)
		if nv == nil || seen[nv.ID] {
			continue
		}
		seen[nv.ID] = true
		for _, ch := range ix.channels[nv.ID] {
			ds.Channels.Total++
			if h, ok := ix.holder[ch.key()]; ok {
				ds.Channels.Used++
				use(h).Channels++
			}
		}
	}
	ds.Gangs = sortedUses(uses)
	return ds
}

// sortedUses orders gangs by GPUs held (most first), then channels, then
// namespace and name.
func sortedUses(uses map[GangRef]*GangUse) []GangUse {
	out := make([]GangUse, 0, len(uses))
	for _, u := range uses {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.GPUs != b.GPUs {
			return a.GPUs > b.GPUs
		}
		if a.Channels != b.Channels {
			return a.Channels > b.Channels
		}
		return gangLess(a.GangRef, b.GangRef)
	})
	return out
}

func gangLess(a, b GangRef) bool {
	if a.Namespace != b.Namespace || a.Name != b.Name {
		return nsNameLess(a.Namespace, a.Name, b.Namespace, b.Name)
	}
	return a.Kind < b.Kind
}

func nsNameLess(ns1, name1, ns2, name2 string) bool {
	if ns1 != ns2 {
		return ns1 < ns2
	}
	return name1 < name2
}

// waitingGangs lists the PodGroups that are not placed and not being
// deleted, sorted by namespace and name, with the reason and message of
// their condition, their priority, age and position in the queue order
// among them.
func waitingGangs(c *Cluster, ix *index) []WaitingGang {
	var out []WaitingGang
	for i := range c.PodGroups {
		pg := &c.PodGroups[i]
		if pg.DeletionTimestamp != nil {
			continue
		}
		cond := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled)
		if cond != nil && cond.Status == metav1.ConditionTrue {
			continue
		}
		members := membersOf(c.Pods, pg.Namespace, pg.Name)
		w := WaitingGang{Namespace: pg.Namespace, Name: pg.Name, Job: ix.jobs[pg.Namespace+"/"+pg.Name],
			Priority: groupPriority(pg, members), Created: pg.CreationTimestamp.UTC()}
		if cond != nil {
			w.Reason, w.Message = cond.Reason, cond.Message
		} else {
			w.Reason, w.Message = notAttempted(pg, members)
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool {
		return nsNameLess(out[i].Namespace, out[i].Name, out[j].Namespace, out[j].Name)
	})
	numberQueue(out)
	return out
}

// notAttempted says why a PodGroup without condition waits.
func notAttempted(pg *schedulingv1beta1.PodGroup, members []*corev1.Pod) (reason, message string) {
	ungated := 0
	for _, p := range members {
		if len(p.Spec.SchedulingGates) == 0 {
			ungated++
		}
	}
	if mc := minCount(pg); ungated < int(mc) {
		return vocab.ReasonWaitingForMembers, fmt.Sprintf("%d of %d members exist without scheduling gates (minCount %d)", ungated, len(members), mc)
	}
	return ReasonPending, "not attempted yet"
}

func minCount(pg *schedulingv1beta1.PodGroup) int32 {
	if g := pg.Spec.SchedulingPolicy.Gang; g != nil {
		return g.MinCount
	}
	return 1
}

// membersOf returns the pods that name a PodGroup, sorted by name.
func membersOf(pods []corev1.Pod, ns, group string) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range pods {
		if p := &pods[i]; p.Namespace == ns && podGroupOf(p) == group {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
