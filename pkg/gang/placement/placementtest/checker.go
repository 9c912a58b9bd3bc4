package placementtest

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Checker validates decisions independently of the engine, keeping the
// cluster's state across the decisions of several gangs.
type Checker struct {
	nodes    map[string]*v1.Node
	domain   map[string]string // node → nvlinkDomain
	used     map[string]string // driver/pool/device → user
	cpu, mem map[string]int64
	pods     map[string]int64
	// attrs: every published device's attributes, by driver/pool/device.
	attrs map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	// devices: every published device, by driver/pool/device;
	// nodeDevices: those of node-local slices, by node (railcheck.go).
	devices     map[string]railDevice
	nodeDevices map[string][]railDevice
}

// NewChecker starts from the input's nodes, bound pods and allocations.
func NewChecker(in index.SnapshotInput) *Checker {
	c := &Checker{nodes: map[string]*v1.Node{}, domain: map[string]string{}, used: map[string]string{},
		cpu: map[string]int64{}, mem: map[string]int64{}, pods: map[string]int64{},
		attrs:   map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{},
		devices: map[string]railDevice{}, nodeDevices: map[string][]railDevice{}}
	for _, sl := range in.ResourceSlices {
		for _, d := range sl.Spec.Devices {
			key := sl.Spec.Driver + "/" + sl.Spec.Pool.Name + "/" + d.Name
			c.attrs[key] = d.Attributes
			rd := newRailDevice(key, d)
			c.devices[key] = rd
			if sl.Spec.NodeName != nil {
				c.nodeDevices[*sl.Spec.NodeName] = append(c.nodeDevices[*sl.Spec.NodeName], rd)
			}
		}
	}
	for _, n := range in.Nodes {
		c.nodes[n.Name] = n
	}
	for node, info := range topology.NodeGPUs(in.ResourceSlices) {
		c.domain[node] = info.NVLinkDomain
	}
	for _, p := range in.Pods {
		if p.Spec.NodeName != "" {
			c.addPod(p, p.Spec.NodeName)
		}
	}
	for _, cl := range in.ResourceClaims {
		if a := cl.Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				c.used[r.Driver+"/"+r.Pool+"/"+r.Device] = "existing " + cl.Name
			}
		}
	}
	return c
}

func (c *Checker) addPod(p *v1.Pod, node string) {
	req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	c.cpu[node] += req.Cpu().MilliValue()
	c.mem[node] += req.Memory().Value()
	c.pods[node]++
}

// Check validates one decision and records it: every member placed once on
// a node that tolerates its taints and matches its node selector, within
// the node's cpu, memory and pods, all in one domain of the decision's
// level, every claim allocated with its count of devices that nobody else
// uses, per-pod devices on the pod's own node, every node selector of the
// pod's claims matched, every matchAttribute constraint met.
//
// A decision may place fewer members than the gang has, never fewer than
// MinCount, each member at most once; with BoundNodes, the members go to
// the domain of the bound nodes.
func (c *Checker) Check(g *placement.Gang, d *placement.Decision) error {
	if len(d.Pods) < g.MinCount || len(d.Pods) > len(g.Members) {
		return fmt.Errorf("%d pods placed, gang has %d with minCount %d", len(d.Pods), len(g.Members), g.MinCount)
	}
	member := map[string]placement.Member{}
	for _, m := range g.Members {
		member[m.Pod.Name] = m
	}
	var errs []error
	domains := map[string]bool{}
	for _, bn := range g.BoundNodes {
		if n := c.nodes[bn]; n != nil {
			domains[c.domainOf(d.TopologyKey, n)] = true
		}
	}
	for _, pp := range d.Pods {
		m, ok := member[pp.Name]
		n := c.nodes[pp.Node]
		if n == nil || !ok {
			return fmt.Errorf("pod %s: bad placement %+v", pp.Name, pp)
		}
		delete(member, pp.Name)
		errs = append(errs, c.checkNode(m.Pod, n))
		c.addPod(m.Pod, n.Name)
		domains[c.domainOf(d.TopologyKey, n)] = true
	}
	if len(domains) != 1 {
		errs = append(errs, fmt.Errorf("pods span %d domains of %s: %v", len(domains), d.TopologyKey, domains))
	}
	podNode := map[string]*v1.Node{}
	for _, pp := range d.Pods {
		podNode[pp.Name] = c.nodes[pp.Node]
	}
	errs = append(errs, checkOwners(g, d))
	for _, ca := range d.Claims {
		errs = append(errs, c.checkClaim(g, d, ca, podNode))
	}
	errs = append(errs, c.checkRails(g, d), c.checkSegments(g, d))
	return errors.Join(errs...)
}

// checkOwners: every unallocated claim of a placed member, and every
// unallocated shared claim, is allocated exactly once, for its own pod
// (shared claims for the gang); the decision allocates no other claim.
func checkOwners(g *placement.Gang, d *placement.Decision) error {
	want := map[string]string{} // claim → owner ("" for shared claims)
	placed := map[string]bool{}
	for _, pp := range d.Pods {
		placed[pp.Name] = true
	}
	for _, m := range g.Members {
		for _, cl := range m.Claims {
			if placed[m.Pod.Name] && cl.Status.Allocation == nil {
				want[cl.Name] = m.Pod.Name
			}
		}
	}
	for _, cl := range g.SharedClaims {
		if cl.Status.Allocation == nil {
			want[cl.Name] = ""
		}
	}
	seen := map[string]bool{}
	for _, ca := range d.Claims {
		owner, ok := want[ca.Name]
		switch {
		case !ok:
			return fmt.Errorf("claim %s: not a claim of a placed member or of the gang", ca.Name)
		case seen[ca.Name]:
			return fmt.Errorf("claim %s: allocated twice", ca.Name)
		case ca.Shared != (owner == "") || (!ca.Shared && ca.Pod != owner):
			return fmt.Errorf("claim %s: allocated for pod %q (shared %v), belongs to %q", ca.Name, ca.Pod, ca.Shared, owner)
		}
		seen[ca.Name] = true
	}
	if len(seen) != len(want) {
		return fmt.Errorf("%d claims allocated, want %d", len(seen), len(want))
	}
	return nil
}

func (c *Checker) checkNode(p *v1.Pod, n *v1.Node) error {
	logger := klog.Background()
	if _, bad := corev1helpers.FindMatchingUntoleratedTaint(logger, n.Spec.Taints, p.Spec.Tolerations, func(t *v1.Taint) bool {
		return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
	}, false); bad {
		return fmt.Errorf("pod %s on %s: untolerated taint", p.Name, n.Name)
	}
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(p).Match(n); !ok {
		return fmt.Errorf("pod %s on %s: affinity mismatch", p.Name, n.Name)
	}
	req := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	a := n.Status.Allocatable
	switch {
	case c.cpu[n.Name]+req.Cpu().MilliValue() > a.Cpu().MilliValue():
		return fmt.Errorf("pod %s on %s: cpu overcommitted", p.Name, n.Name)
	case c.mem[n.Name]+req.Memory().Value() > a.Memory().Value():
		return fmt.Errorf("pod %s on %s: memory overcommitted", p.Name, n.Name)
	case c.pods[n.Name]+1 > a.Pods().Value():
		return fmt.Errorf("pod %s on %s: too many pods", p.Name, n.Name)
	}
	return nil
}

func (c *Checker) domainOf(key string, n *v1.Node) string {
	switch key {
	case topology.TopologyKeyNVLinkDomain:
		if d := c.domain[n.Name]; d != "" {
			return d
		}
		return topology.NodeDomainID(topology.DomainKindNone, n.Name)
	case topology.TopologyKeyCluster:
		return topology.ClusterDomainID
	default:
		v, ok := n.Labels[key]
		if !ok {
			return "<missing " + key + " on " + n.Name + ">"
		}
		return v
	}
}

func (c *Checker) checkClaim(g *placement.Gang, d *placement.Decision, ca placement.ClaimAllocation, podNode map[string]*v1.Node) error {
	want := int64(0)
	for _, m := range g.Members {
		for _, cl := range m.Claims {
			if cl.Name == ca.Name {
				want = requestCount(cl, &ca.Allocation)
			}
		}
	}
	for _, cl := range g.SharedClaims {
		if cl.Name == ca.Name {
			want = requestCount(cl, &ca.Allocation)
		}
	}
	if got := int64(len(ca.Allocation.Devices.Results)); got != want {
		return fmt.Errorf("claim %s: %d devices, want %d", ca.Name, got, want)
	}
	if err := c.checkConstraints(g, ca); err != nil {
		return err
	}
	var sel *nodeaffinity.NodeSelector
	if ns := ca.Allocation.NodeSelector; ns != nil {
		var err error
		if sel, err = nodeaffinity.NewNodeSelector(ns); err != nil {
			return fmt.Errorf("claim %s: %w", ca.Name, err)
		}
	}
	for _, pp := range d.Pods {
		if (ca.Shared || ca.Pod == pp.Name) && sel != nil && !sel.Match(podNode[pp.Name]) {
			return fmt.Errorf("claim %s: pod %s on %s outside node selector", ca.Name, pp.Name, pp.Node)
		}
	}
	for _, r := range ca.Allocation.Devices.Results {
		id := r.Driver + "/" + r.Pool + "/" + r.Device
		if prev, ok := c.used[id]; ok {
			return fmt.Errorf("claim %s: device %s already used by %s", ca.Name, id, prev)
		}
		c.used[id] = ca.Name
		if !ca.Shared && r.Pool != podNode[ca.Pod].Name {
			return fmt.Errorf("claim %s: device %s not on the pod's node %s", ca.Name, id, podNode[ca.Pod].Name)
		}
	}
	return nil
}

// requestCount is the sum of the counts of the claim's requests: of an
// exact request, or of the firstAvailable subrequest the allocation chose
// (-1 when none). Every result must name one of the claim's requests.
func requestCount(cl *resourceapi.ResourceClaim, a *resourceapi.AllocationResult) int64 {
	names := map[string]bool{}
	total := int64(0)
	for _, r := range cl.Spec.Devices.Requests {
		if r.Exactly != nil {
			total += r.Exactly.Count
			names[r.Name] = true
			continue
		}
		chosen := int64(-1)
		for _, sub := range r.FirstAvailable {
			name := r.Name + "/" + sub.Name
			names[name] = true
			if a != nil && slices.ContainsFunc(a.Devices.Results, func(d resourceapi.DeviceRequestAllocationResult) bool { return d.Request == name }) {
				chosen = sub.Count
			}
		}
		if chosen < 0 {
			return -1
		}
		total += chosen
	}
	if a != nil && slices.ContainsFunc(a.Devices.Results, func(d resourceapi.DeviceRequestAllocationResult) bool { return !names[d.Request] }) {
		return -1
	}
	return total
}

// checkConstraints checks the matchAttribute constraints of a claim: the
// devices of the requests they name (all when none) carry the attribute
// with one value.
func (c *Checker) checkConstraints(g *placement.Gang, ca placement.ClaimAllocation) error {
	var claim *resourceapi.ResourceClaim
	for _, m := range g.Members {
		for _, cl := range m.Claims {
			if cl.Name == ca.Name {
				claim = cl
			}
		}
	}
	if claim == nil {
		return nil
	}
	for _, con := range claim.Spec.Devices.Constraints {
		if con.MatchAttribute == nil {
			continue
		}
		var first *resourceapi.DeviceAttribute
		for _, r := range ca.Allocation.Devices.Results {
			req, _, _ := strings.Cut(r.Request, "/")
			if len(con.Requests) > 0 && !slices.Contains(con.Requests, req) {
				continue
			}
			attrs := c.attrs[r.Driver+"/"+r.Pool+"/"+r.Device]
			v, ok := attrs[resourceapi.QualifiedName(*con.MatchAttribute)]
			if short, own := strings.CutPrefix(string(*con.MatchAttribute), r.Driver+"/"); !ok && own {
				v, ok = attrs[resourceapi.QualifiedName(short)]
			}
			switch {
			case !ok:
				return fmt.Errorf("claim %s: device %s has no attribute %s", ca.Name, r.Device, *con.MatchAttribute)
			case first == nil:
				first = &v
			case !equality.Semantic.DeepEqual(*first, v):
				return fmt.Errorf("claim %s: devices differ in %s", ca.Name, *con.MatchAttribute)
			}
		}
	}
	return nil
}
