package assume

import (
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
)

// Caught tells whether the placement cache has been given an object at a
// resourceVersion (index.Cache.Caught).
type Caught interface {
	Caught(uid types.UID, rv string) bool
}

// Shown answers whether the informers, and the placement cache they feed
// after their listers (nil: none), show all writes of an entry.
type Shown struct {
	Pods   corelisters.PodLister
	Nodes  corelisters.NodeLister
	Claims resourcelisters.ResourceClaimLister
	Cache  Caught
}

// Visible reports whether the informers show all of e's writes (the
// package's rules).
func (sh *Shown) Visible(e *Entry) bool {
	for _, part := range e.Parts {
		if !sh.podsShown(part.Decision) || !sh.claimsShown(part.Decision, e.Written) {
			return false
		}
	}
	return true
}

func (sh *Shown) podsShown(d *placement.Decision) bool {
	for _, pp := range d.Pods {
		p, err := sh.Pods.Pods(pp.Namespace).Get(pp.Name)
		if err == nil && p.UID == pp.UID && sh.Cache != nil && !sh.Cache.Caught(p.UID, p.ResourceVersion) {
			return false
		}
		if err != nil || p.UID != pp.UID || p.Spec.NodeName != "" || p.DeletionTimestamp != nil || podstate.Terminated(p) {
			continue
		}
		if _, err := sh.Nodes.Get(pp.Node); err == nil {
			return false
		}
	}
	return true
}

func (sh *Shown) claimsShown(d *placement.Decision, written map[types.UID]string) bool {
	for _, c := range d.Claims {
		rc, err := sh.Claims.ResourceClaims(c.Namespace).Get(c.Name)
		if err != nil || rc.UID != c.UID {
			continue
		}
		if sh.Cache != nil && !sh.Cache.Caught(rc.UID, rc.ResourceVersion) {
			return false
		}
		if !reached(rc.ResourceVersion, written[c.UID]) && rc.Status.Allocation == nil {
			return false
		}
	}
	return true
}

// reached reports whether an informer's resourceVersion is at or past the
// one a write returned. resourceVersions are etcd revisions; like
// kube-scheduler's assume cache this compares them as numbers, and treats
// unparsable ones as not reached.
func reached(informer, written string) bool {
	have, err1 := strconv.ParseUint(informer, 10, 64)
	want, err2 := strconv.ParseUint(written, 10, 64)
	return err1 == nil && err2 == nil && have >= want
}

// Devices lists the devices the entries' decisions allocate, less the
// results with admin access.
func Devices(entries []*Entry) []structured.DeviceID {
	var out []structured.DeviceID
	for _, e := range entries {
		for _, part := range e.Parts {
			for _, c := range part.Decision.Claims {
				out = AppendHeld(out, c.Allocation.Devices.Results)
			}
		}
	}
	return out
}

// AppendHeld appends the devices of results that hold them (not admin
// access).
func AppendHeld(out []structured.DeviceID, results []resourceapi.DeviceRequestAllocationResult) []structured.DeviceID {
	for _, r := range results {
		if r.AdminAccess == nil || !*r.AdminAccess {
			out = append(out, structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	return out
}
