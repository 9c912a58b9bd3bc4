package placement

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// usage is what the gang's earlier members take on one node.
type usage struct {
	res  index.ResList
	pods int64
	dev  map[string]int
}

// attempt is a (partial) placement of the gang in one domain.
type attempt struct {
	dom      *topology.Domain
	inflight index.InFlight
	used     map[*index.NodeState]*usage
	shared   []resourceapi.AllocationResult
	// members[i] is the gang index of the i-th placed member; memberNode,
	// memberRes and memberClm are parallel to it.
	members    []int
	memberNode []*index.NodeState
	memberRes  [][]resourceapi.AllocationResult
	memberClm  [][]*resourceapi.ResourceClaim
	score      Score
}

func (att *attempt) place(mi int, ns *index.NodeState, sh *shape, claims []*resourceapi.ResourceClaim, res []resourceapi.AllocationResult) {
	u := att.used[ns]
	if u == nil {
		u = &usage{res: index.ResList{}, dev: map[string]int{}}
		att.used[ns] = u
	}
	u.res.Add(sh.req, 1)
	u.pods++
	for c, n := range sh.need {
		u.dev[c] += n
	}
	att.inflight.Add(res)
	att.members = append(att.members, mi)
	att.memberNode = append(att.memberNode, ns)
	att.memberRes = append(att.memberRes, res)
	att.memberClm = append(att.memberClm, claims)
}

// antiConflict reports whether member mi on ns conflicts by required
// anti-affinity with a member the attempt has placed.
func (att *attempt) antiConflict(m *members, mi int, ns *index.NodeState) bool {
	sh := m.per[mi]
	for i, qi := range att.members {
		q := m.per[qi]
		if (len(sh.anti) > 0 || len(q.anti) > 0) && index.PodsConflict(sh.pod, sh.anti, ns.Node(), q.pod, q.anti, att.memberNode[i].Node()) {
			return true
		}
	}
	return false
}
