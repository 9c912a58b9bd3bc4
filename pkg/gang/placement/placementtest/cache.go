package placementtest

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

// FeedCache adds every object of in to the cache.
func FeedCache(c *index.Cache, in index.SnapshotInput) {
	for _, n := range in.Nodes {
		c.SetNode(n)
	}
	for _, sl := range in.ResourceSlices {
		c.SetSlice(sl)
	}
	for _, dc := range in.DeviceClasses {
		c.SetClass(dc)
	}
	for _, p := range in.Pods {
		c.SetPod(p)
	}
	for _, rc := range in.ResourceClaims {
		c.SetClaim(rc)
	}
}

// PlacedGang is a gang the engine placed, with its claims by name as the
// cache last saw them.
type PlacedGang struct {
	Gang     *placement.Gang
	Decision *placement.Decision
	Claims   map[string]*resourceapi.ResourceClaim
}

// NewPlacedGang keeps a placed gang and its claims.
func NewPlacedGang(g *placement.Gang, d *placement.Decision, claims []*resourceapi.ResourceClaim) *PlacedGang {
	pg := &PlacedGang{Gang: g, Decision: d, Claims: map[string]*resourceapi.ResourceClaim{}}
	for _, c := range claims {
		pg.Claims[c.Name] = c
	}
	return pg
}

// ApplyDecision shows a decision to the cache as the informers would: pods
// bound, claims allocated.
func ApplyDecision(c *index.Cache, pg *PlacedGang) {
	for i, pp := range pg.Decision.Pods {
		p := pg.Gang.Members[i].Pod.DeepCopy()
		p.Spec.NodeName = pp.Node
		c.SetPod(p)
	}
	for _, ca := range pg.Decision.Claims {
		rc := pg.Claims[ca.Name].DeepCopy()
		rc.Status.Allocation = ca.Allocation.DeepCopy()
		pg.Claims[ca.Name] = rc
		c.SetClaim(rc)
	}
}

// FinishGang deletes a gang's pods and claims from the cache.
func FinishGang(c *index.Cache, pg *PlacedGang) {
	for _, pp := range pg.Decision.Pods {
		c.DeletePod(pp.UID)
	}
	for _, rc := range pg.Claims {
		c.DeleteClaim(rc.UID)
	}
}
