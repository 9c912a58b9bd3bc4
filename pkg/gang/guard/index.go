package guard

import (
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// deviceKey identifies one device.
type deviceKey struct{ driver, pool, device string }

func (d deviceKey) String() string { return d.driver + "/" + d.pool + "/" + d.device }

// allocIndex maps devices of driver gpufabric.dev to the claims allocated
// them. Safe for concurrent use.
type allocIndex struct {
	mu      sync.Mutex
	byDev   map[deviceKey]map[types.UID]bool
	byClaim map[types.UID][]deviceKey
	seen    map[types.UID]time.Time // first seen allocated
}

func newAllocIndex() *allocIndex {
	return &allocIndex{byDev: map[deviceKey]map[types.UID]bool{}, byClaim: map[types.UID][]deviceKey{}, seen: map[types.UID]time.Time{}}
}

// set records a claim's allocated devices (none: deallocated or deleted).
// It returns the devices now held by more than one claim, and the other
// claims still holding a device this claim gave up: another scheduler's
// allocated-device set has just forgotten those devices (hold.go).
func (x *allocIndex) set(uid types.UID, devs []deviceKey, now time.Time) (dup []deviceKey, orphans []types.UID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	gone := x.byClaim[uid]
	for _, d := range gone {
		delete(x.byDev[d], uid)
		if len(x.byDev[d]) == 0 {
			delete(x.byDev, d)
		}
	}
	gone = slices.DeleteFunc(slices.Clone(gone), func(d deviceKey) bool { return slices.Contains(devs, d) })
	orphans = x.holdersLocked(gone)
	if len(devs) == 0 {
		delete(x.byClaim, uid)
		delete(x.seen, uid)
		return nil, orphans
	}
	if _, ok := x.seen[uid]; !ok || x.byClaim[uid] == nil {
		x.seen[uid] = now
	}
	x.byClaim[uid] = devs
	for _, d := range devs {
		if x.byDev[d] == nil {
			x.byDev[d] = map[types.UID]bool{}
		}
		x.byDev[d][uid] = true
		if len(x.byDev[d]) > 1 {
			dup = append(dup, d)
		}
	}
	return dup, orphans
}

// holdersOf returns the claims holding any of devs, in UID order.
func (x *allocIndex) holdersOf(devs []deviceKey) []types.UID {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.holdersLocked(devs)
}

func (x *allocIndex) holdersLocked(devs []deviceKey) []types.UID {
	var out []types.UID
	for _, d := range devs {
		for uid := range x.byDev[d] {
			if !slices.Contains(out, uid) {
				out = append(out, uid)
			}
		}
	}
	slices.Sort(out)
	return out
}

// allocated reports whether a claim holds devices of the index.
func (x *allocIndex) allocated(uid types.UID) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.byClaim[uid]) > 0
}

// holders returns the claims holding a device, and when each was first seen.
func (x *allocIndex) holders(d deviceKey) map[types.UID]time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := map[types.UID]time.Time{}
	for uid := range x.byDev[d] {
		out[uid] = x.seen[uid]
	}
	return out
}

// allocatedDevices lists the gpufabric.dev devices of a claim's allocation
// (admin-access results share devices by design and are left out).
func allocatedDevices(c *resourceapi.ResourceClaim) []deviceKey {
	if c == nil || c.Status.Allocation == nil {
		return nil
	}
	var out []deviceKey
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == topology.DriverName && !ptr.Deref(r.AdminAccess, false) {
			out = append(out, deviceKey{r.Driver, r.Pool, r.Device})
		}
	}
	return out
}
