package scheduler

import (
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpufabric/gpufabric/pkg/gang/evict"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
)

// attempt is one scheduling attempt of a gang.
type attempt struct {
	key string
	// cycle is the queue's move counter when the attempt started, begin
	// the time.
	cycle uint64
	begin time.Time
	// result of the attempt, for attempt_duration_seconds.
	result string
	pg     *schedulingv1beta1.PodGroup // nil for a gang of one
	pod    *v1.Pod                     // the pod of a gang of one
	// eff is the gang's effective priority and preemption policy
	// (evict.Priorities).
	eff preemption.Effective
	// members are the gang's pods to place; late: they join a placed gang.
	members []*v1.Pod
	late    bool
	// async: the attempt's commit runs in the pipeline, which reports it.
	async bool
	// short: refused because no domain had enough free devices, lacking
	// short in the one with the most (devicesShort): it is parked with
	// queue.parkDevicesShort. 0 otherwise.
	short int
}

// about is the object events and conditions are about.
func (a *attempt) about() runtime.Object {
	if a.pg != nil {
		return a.pg
	}
	return a.pod
}

// preemptor is the attempt as the evict room sees it.
func (a *attempt) preemptor() *evict.Attempt {
	return &evict.Attempt{Key: a.key, PodGroup: a.pg, Pod: a.pod, Priority: a.eff.Priority, NoPreemption: a.eff.NoPreemption, Capped: a.eff.Capped, Members: a.members}
}

// devicesShort reports how many devices a refused gang lacks when only
// freed devices can help it, 0 otherwise: it wants all its members
// (minCount = its size) and, at every level the engine tried, even the
// domain with the most free devices of its main class had fewer than the
// gang needs; it lacks the difference in the best of them.
func devicesShort(g *placement.Gang, u *placement.Unschedulable) int {
	if u.Devices == 0 || len(u.Levels) == 0 || g.MinCount < len(g.Members) {
		return 0
	}
	most := 0
	for _, l := range u.Levels {
		if l.Best != nil && l.Best.FreeDevices >= u.Devices {
			return 0
		}
		if l.Best != nil {
			most = max(most, l.Best.FreeDevices)
		}
	}
	return u.Devices - most
}
