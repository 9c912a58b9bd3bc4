package rails

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Claims limited to a set of IB rails (search.go, follow.go).
//
// Rules: every request and firstAvailable subrequest of the copies gets a
// CEL selector "the device has no ibRail attribute, or one in the set", so
// devices without rails (and devices of other drivers) stay allowed. With
// cover, a member whose claims have exactly one exactCount request of the
// gang's main class (no admin access) asking at least as many devices as
// the set has rails gets that request split: one request per rail of the
// set for one device on that rail, then the rest (when the request asks
// more) on any rail of the set. The allocator then has to give the member
// a device on every rail of the set, so the member's rails are the set
// itself, not a part of it, which matters when a node has several devices
// per rail. The pieces are named "<request>-rail<r>" (made unique in the
// claim); constraints and configs that name the request name the pieces
// too, and Unsplit renames the results back, so that a Decision only ever
// names the claim's own requests. firstAvailable requests are never split.
// A split copy carries its pieces' original names (splitAnnotation), so
// that any Copies renames back the results of a copy made by another one,
// of a DeepCopy of it, or of a copy of it limited again (a coupled role's
// claims are limited to its rail set before the engine limits them
// further, Gang.Rails).

// splitAnnotation, on a copy whose requests were split (never written to
// the API: copies live in one Place call), maps each piece to the
// claim's own request: "piece=request,...", sorted. Its key has a space,
// which no object of the API can carry (an annotation key is a qualified
// name), so that a tenant cannot write it on a claim.
const splitAnnotation = "gpufabric.dev/rails split requests"

// Selector is the selector of the devices on one of the rails, or on
// none.
func Selector(rails []int64) resourceapi.DeviceSelector {
	parts := make([]string, len(rails))
	for i, r := range rails {
		parts[i] = strconv.FormatInt(r, 10)
	}
	expr := fmt.Sprintf(`!(%q in device.attributes[%q]) || device.attributes[%q].%s in [%s]`,
		topology.AttrIBRail, topology.DriverName, topology.DriverName, topology.AttrIBRail, strings.Join(parts, ","))
	return resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}
}

// pinSelector is the selector of the devices on one rail.
func pinSelector(rail int64) resourceapi.DeviceSelector {
	expr := fmt.Sprintf(`%q in device.attributes[%q] && device.attributes[%q].%s == %d`,
		topology.AttrIBRail, topology.DriverName, topology.DriverName, topology.AttrIBRail, rail)
	return resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}
}

// Copies makes and keeps one Place call's rail-limited copies of
// claims (see the rules above).
type Copies struct {
	// class is the gang's main class.
	class string
	// byKey: the copies, by claims, rail set and cover; splits: per claim
	// read, its pieces' original requests (splitAnnotation; nil: none).
	// Made on first use.
	byKey  map[string][]*resourceapi.ResourceClaim
	splits map[*resourceapi.ResourceClaim]map[string]string
}

// NewCopies returns an empty Copies for a gang whose main class is
// class.
func NewCopies(class string) *Copies { return &Copies{class: class} }

// Limit returns copies of a member's claims (its own, or copies of them)
// limited to the rails (see the rules above), cached per claims, rail set
// and cover.
func (cp *Copies) Limit(claims []*resourceapi.ResourceClaim, rails []int64, cover bool) []*resourceapi.ResourceClaim {
	if len(claims) == 0 {
		return claims
	}
	k := fmt.Sprintf("%p|%s|%v", claims[0], Key(slices.Clone(rails)), cover)
	if v, ok := cp.byKey[k]; ok {
		return v
	}
	if cp.byKey == nil {
		cp.byKey = map[string][]*resourceapi.ResourceClaim{}
	}
	split := cover && len(rails) > 1 && cp.mainRequests(claims) == 1
	out := make([]*resourceapi.ResourceClaim, len(claims))
	for i, c := range claims {
		prev := cp.renamesOf(c)
		c = c.DeepCopy()
		sel := Selector(rails)
		var reqs []resourceapi.DeviceRequest
		for _, r := range c.Spec.Devices.Requests {
			if split && cp.splittable(r, len(rails)) {
				pieces := splitRequest(c, r, rails, sel)
				setRenames(c, prev, pieces.renames)
				reqs = append(reqs, pieces.requests...)
				continue
			}
			if r.Exactly != nil {
				r.Exactly.Selectors = append(r.Exactly.Selectors, sel)
			}
			for j := range r.FirstAvailable {
				r.FirstAvailable[j].Selectors = append(r.FirstAvailable[j].Selectors, sel)
			}
			reqs = append(reqs, r)
		}
		c.Spec.Devices.Requests = reqs
		out[i] = c
	}
	cp.byKey[k] = out
	return out
}

// mainRequests counts the requests and subrequests of the main class in
// the claims.
func (cp *Copies) mainRequests(claims []*resourceapi.ResourceClaim) int {
	n := 0
	for _, c := range claims {
		for _, r := range c.Spec.Devices.Requests {
			if r.Exactly != nil && r.Exactly.DeviceClassName == cp.class {
				n++
			}
			for _, sub := range r.FirstAvailable {
				if sub.DeviceClassName == cp.class {
					n++
				}
			}
		}
	}
	return n
}

// splittable: an exactCount request of the main class without admin
// access asking at least k devices.
func (cp *Copies) splittable(r resourceapi.DeviceRequest, k int) bool {
	e := r.Exactly
	if e == nil || e.DeviceClassName != cp.class || (e.AdminAccess != nil && *e.AdminAccess) {
		return false
	}
	if e.AllocationMode != "" && e.AllocationMode != resourceapi.DeviceAllocationModeExactCount {
		return false
	}
	return int(max(e.Count, 1)) >= k
}

type splitPieces struct {
	requests []resourceapi.DeviceRequest
	renames  map[string]string // piece → the original request
}

// splitRequest splits r of claim c (a copy, whose constraints and configs
// it rewrites) into one request per rail and the rest (see the rules).
func splitRequest(c *resourceapi.ResourceClaim, r resourceapi.DeviceRequest, rails []int64, sel resourceapi.DeviceSelector) splitPieces {
	used := map[string]bool{}
	for _, q := range c.Spec.Devices.Requests {
		used[q.Name] = true
	}
	out := splitPieces{renames: map[string]string{}}
	var names []string
	for _, rail := range rails {
		name := fmt.Sprintf("%s-rail%d", r.Name, rail)
		for used[name] {
			name += "x"
		}
		used[name] = true
		piece := *r.Exactly
		piece.AllocationMode, piece.Count = resourceapi.DeviceAllocationModeExactCount, 1
		piece.Selectors = append(slices.Clone(r.Exactly.Selectors), pinSelector(rail))
		out.requests = append(out.requests, resourceapi.DeviceRequest{Name: name, Exactly: &piece})
		out.renames[name] = r.Name
		names = append(names, name)
	}
	if rest := max(r.Exactly.Count, 1) - int64(len(rails)); rest > 0 {
		r.Exactly.Count = rest
		r.Exactly.Selectors = append(r.Exactly.Selectors, sel)
		out.requests = append(out.requests, r)
		names = append(names, r.Name)
	}
	for i := range c.Spec.Devices.Constraints {
		con := &c.Spec.Devices.Constraints[i]
		con.Requests = renameList(con.Requests, r.Name, names)
	}
	for i := range c.Spec.Devices.Config {
		cfg := &c.Spec.Devices.Config[i]
		cfg.Requests = renameList(cfg.Requests, r.Name, names)
	}
	return out
}

// renameList replaces name in list by names (nil stays nil: "all").
func renameList(list []string, name string, names []string) []string {
	if !slices.Contains(list, name) {
		return list
	}
	var out []string
	for _, n := range list {
		if n == name {
			out = append(out, names...)
			continue
		}
		out = append(out, n)
	}
	return out
}

// Unsplit renames the results of split claims (claims[i] gave res[i])
// back to the original requests, in place.
func (cp *Copies) Unsplit(claims []*resourceapi.ResourceClaim, res []resourceapi.AllocationResult) []resourceapi.AllocationResult {
	for i, c := range claims {
		renames := cp.renamesOf(c)
		if renames == nil || i >= len(res) {
			continue
		}
		for j := range res[i].Devices.Results {
			d := &res[i].Devices.Results[j]
			if orig, ok := renames[d.Request]; ok {
				d.Request = orig
			}
		}
		for j := range res[i].Devices.Config {
			cfg := &res[i].Devices.Config[j]
			var names []string
			for _, n := range cfg.Requests {
				if orig, ok := renames[n]; ok {
					n = orig
				}
				if !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
			if cfg.Requests != nil {
				cfg.Requests = names
			}
		}
	}
	return res
}

// renamesOf returns a claim's pieces' original requests (splitAnnotation;
// nil when it has none), read once per claim.
func (cp *Copies) renamesOf(c *resourceapi.ResourceClaim) map[string]string {
	v, ok := c.Annotations[splitAnnotation]
	if !ok {
		return nil
	}
	if r, ok := cp.splits[c]; ok {
		return r
	}
	out := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		if piece, req, ok := strings.Cut(kv, "="); ok {
			out[piece] = req
		}
	}
	if cp.splits == nil {
		cp.splits = map[*resourceapi.ResourceClaim]map[string]string{}
	}
	cp.splits[c] = out
	return out
}

// setRenames writes a split copy's splitAnnotation: the renames it had
// (prev), and the new pieces' (renames), through prev to the claim's own
// requests.
func setRenames(c *resourceapi.ResourceClaim, prev, renames map[string]string) {
	all := maps.Clone(prev)
	if all == nil {
		all = map[string]string{}
	}
	for piece, req := range renames {
		if orig, ok := prev[req]; ok {
			req = orig
		}
		all[piece] = req
	}
	parts := make([]string, 0, len(all))
	for piece, req := range all {
		parts = append(parts, piece+"="+req)
	}
	slices.Sort(parts)
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[splitAnnotation] = strings.Join(parts, ",")
}

// Key names a set of rails: sorted, distinct, comma-separated. It
// sorts rails in place.
func Key(rails []int64) string {
	slices.Sort(rails)
	parts := make([]string, 0, len(rails))
	for i, r := range rails {
		if i > 0 && rails[i-1] == r {
			continue
		}
		parts = append(parts, strconv.FormatInt(r, 10))
	}
	return strings.Join(parts, ",")
}
