package placement

import (
	"encoding/json"
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/extended"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

// members is what a Place call knows of the gang's members. Immutable;
// the pieces of one Place share it.
type members struct {
	// per is each member's shape; distinct the distinct ones, in order of
	// first appearance; ids, per member, the index of its shape in
	// distinct.
	per      []*shape
	distinct []*shape
	ids      []int
	// class is the main class (primaryClass); need the gang's devices of
	// it; perPod the fewest any member needs.
	class  string
	need   int
	perPod int
}

func newMembers(g *Gang) (*members, error) {
	per, distinct, err := gangShapes(g)
	if err != nil {
		return nil, err
	}
	m := &members{per: per, distinct: distinct}
	for _, sh := range per {
		for i, d := range distinct {
			if d.sig == sh.sig {
				m.ids = append(m.ids, i)
				break
			}
		}
	}
	m.class, m.need = primaryClass(per)
	m.perPod = m.need
	for _, sh := range per {
		m.perPod = min(m.perPod, sh.need[m.class])
	}
	return m, nil
}

// devicesOf counts the devices of the main class the attempt's members
// take.
func (m *members) devicesOf(att *attempt) int {
	n := 0
	for _, mi := range att.members {
		n += m.per[mi].need[m.class]
	}
	return n
}

// shape is what the engine needs of one member; members with equal
// signatures are interchangeable.
type shape struct {
	sig      string
	pod      *v1.Pod
	req      index.ResList
	resNames []v1.ResourceName // sorted
	affinity nodeaffinity.RequiredNodeAffinity
	// pinned are node selectors of the member's already allocated claims;
	// volumes those of its bound volumes.
	pinned  []*nodeaffinity.NodeSelector
	volumes []*nodeaffinity.NodeSelector
	// anti are its required pod anti-affinity terms.
	anti []*index.AntiTerm
	// extended are its DRA-backed extended resources, not in req.
	extended []v1.ResourceName
	// claims to allocate (unallocated), and all classes they use.
	claims     []*resourceapi.ResourceClaim
	allClasses []string
	// need is a lower bound of devices per class; classes lists its keys.
	need    map[string]int
	classes []string
}

// newShape derives a member's shape. Requests with a count bound are
// exactCount requests without admin access; others only go through the
// allocator.
func newShape(m Member) (*shape, error) {
	sh := &shape{pod: m.Pod, req: m.Extended.Without(index.PodRequests(m.Pod)), extended: extended.NamesOf(m.Extended), affinity: nodeaffinity.GetRequiredNodeAffinity(m.Pod), need: map[string]int{}}
	for name := range sh.req {
		sh.resNames = append(sh.resNames, name)
	}
	sort.Slice(sh.resNames, func(i, j int) bool { return sh.resNames[i] < sh.resNames[j] })
	var specs []resourceapi.ResourceClaimSpec
	var pins []*v1.NodeSelector
	for _, c := range m.Claims {
		if a := c.Status.Allocation; a != nil {
			if a.NodeSelector != nil {
				sel, err := nodeaffinity.NewNodeSelector(a.NodeSelector)
				if err != nil {
					return nil, fmt.Errorf("claim %s/%s: node selector: %w", c.Namespace, c.Name, err)
				}
				sh.pinned = append(sh.pinned, sel)
				pins = append(pins, a.NodeSelector)
			}
			continue
		}
		sh.claims = append(sh.claims, c)
		specs = append(specs, c.Spec)
		addNeed(sh.need, c)
	}
	for _, vs := range m.VolumePins {
		sel, err := nodeaffinity.NewNodeSelector(vs)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: volume node affinity: %w", m.Pod.Namespace, m.Pod.Name, err)
		}
		sh.volumes = append(sh.volumes, sel)
	}
	anti, err := index.AntiTerms(m.Pod)
	if err != nil {
		return nil, err
	}
	sh.anti = anti
	for class := range sh.need {
		sh.classes = append(sh.classes, class)
	}
	sort.Strings(sh.classes)
	sh.allClasses = claimClasses(sh.claims)
	sig, err := json.Marshal(struct {
		Req          index.ResList
		Tolerations  []v1.Toleration
		NodeSelector map[string]string
		Affinity     *v1.NodeSelector
		Claims       []resourceapi.ResourceClaimSpec
		Pins         []*v1.NodeSelector
		Volumes      []*v1.NodeSelector
		Anti         []v1.PodAffinityTerm
		Extended     []v1.ResourceName `json:",omitempty"`
	}{sh.req, m.Pod.Spec.Tolerations, m.Pod.Spec.NodeSelector, requiredAffinity(m.Pod), specs, pins, m.VolumePins, requiredAnti(m.Pod), sh.extended})
	if err != nil {
		return nil, fmt.Errorf("member signature: %w", err)
	}
	sh.sig = string(sig)
	return sh, nil
}

func requiredAnti(p *v1.Pod) []v1.PodAffinityTerm {
	if a := p.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
		return a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	return nil
}

func requiredAffinity(p *v1.Pod) *v1.NodeSelector {
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		return a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	return nil
}

func addNeed(need map[string]int, c *resourceapi.ResourceClaim) {
	for _, r := range c.Spec.Devices.Requests {
		if class, n := alternativesNeed(r.FirstAvailable); n > 0 {
			need[class] += n
			continue
		}
		e := r.Exactly
		if e == nil || (e.AdminAccess != nil && *e.AdminAccess) {
			continue
		}
		if e.AllocationMode != "" && e.AllocationMode != resourceapi.DeviceAllocationModeExactCount {
			continue
		}
		count := int(e.Count)
		if count == 0 {
			count = 1
		}
		need[e.DeviceClassName] += count
	}
}

// alternativesNeed returns the fewest devices any of a firstAvailable
// request's subrequests takes, when all are exactCount requests of one
// class (0 otherwise: no bound).
func alternativesNeed(subs []resourceapi.DeviceSubRequest) (string, int) {
	class, least := "", 0
	for i, sub := range subs {
		exact := sub.AllocationMode == "" || sub.AllocationMode == resourceapi.DeviceAllocationModeExactCount
		if !exact || (i > 0 && sub.DeviceClassName != class) {
			return "", 0
		}
		if n := int(max(sub.Count, 1)); i == 0 || n < least {
			least = n
		}
		class = sub.DeviceClassName
	}
	return class, least
}

// gangShapes returns each member's shape (members with equal signatures
// share one) and the distinct shapes in order of first appearance.
func gangShapes(g *Gang) ([]*shape, []*shape, error) {
	bySig := map[string]*shape{}
	var per, distinct []*shape
	for _, m := range g.Members {
		sh, err := newShape(m)
		if err != nil {
			return nil, nil, err
		}
		if prev := bySig[sh.sig]; prev != nil {
			// Same signature, own claims: keep the member's claims but the
			// shared checks' cache key.
			sh.sig = prev.sig
		} else {
			bySig[sh.sig] = sh
			distinct = append(distinct, sh)
		}
		per = append(per, sh)
	}
	return per, distinct, nil
}

// primaryClass is the class the gang needs the most devices of (ties by
// name), with the total; "" when no request has a count bound.
func primaryClass(per []*shape) (string, int) {
	total := map[string]int{}
	for _, sh := range per {
		for c, n := range sh.need {
			total[c] += n
		}
	}
	best, bestN := "", 0
	for c, n := range total {
		if n > bestN || (n == bestN && c < best) {
			best, bestN = c, n
		}
	}
	return best, bestN
}

// claimClasses returns the sorted class names the claims' requests use.
func claimClasses(claims []*resourceapi.ResourceClaim) []string {
	set := map[string]bool{}
	for _, c := range claims {
		for _, r := range c.Spec.Devices.Requests {
			if r.Exactly != nil {
				set[r.Exactly.DeviceClassName] = true
			}
			for _, sub := range r.FirstAvailable {
				set[sub.DeviceClassName] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}
