package extres

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
)

// Request is what a pod's extended resources backed by DRA ask for: the
// device requests of its special claim and the mappings of its
// status.extendedResourceClaimStatus.
type Request struct {
	// Names are the DRA-backed extended resources the pod requests,
	// sorted; Classes the class of each, Counts the pod's request of each.
	Names   []v1.ResourceName
	Classes []string
	Counts  []int64
	// Requests, sorted by name: container-<i>-request-<j>, where i indexes
	// the pod's init containers then its containers, and j the resource
	// among the container's requests sorted by name.
	Requests []resourceapi.DeviceRequest
	Mappings []v1.ContainerExtendedResourceRequest
}

// RequestOf returns what the pod's DRA-backed extended resources ask for,
// nil when it requests none. It follows kube-scheduler 1.37: each
// long-lived container (a regular container or a sidecar, an init
// container with restartPolicy Always) gets a request of its own; an init
// container that runs before them first reuses the requests of the
// long-lived containers from its own position on, and only the largest
// remainder of all such init containers gets a request, which the others
// share (they run one at a time). A claim holds at most
// resourceapi.AllocationResultsMaxSize devices and DeviceRequestsMaxSize
// requests: a pod asking for more is refused (ErrUnsupported). Pure.
func RequestOf(p *v1.Pod, classes Classes) (*Request, error) {
	if !asksAny(p, classes) {
		return nil, nil // most pods: no PodRequests to compute
	}
	var names []v1.ResourceName
	podReqs := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	for name, q := range podReqs {
		if !q.IsZero() && classes.For(name) != nil {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names)
	containers := slices.Concat(p.Spec.InitContainers, p.Spec.Containers)
	r := &Request{Names: names}
	for _, name := range names {
		class := classes.For(name).Name
		r.Classes = append(r.Classes, class)
		q := podReqs[name]
		r.Counts = append(r.Counts, q.Value())
		reqs, maps := resourceRequests(containers, len(p.Spec.InitContainers), name, class)
		r.Requests = append(r.Requests, reqs...)
		r.Mappings = append(r.Mappings, maps...)
	}
	slices.SortFunc(r.Requests, func(a, b resourceapi.DeviceRequest) int { return cmp.Compare(a.Name, b.Name) })
	return r, r.check(p)
}

// asksAny reports whether a container of the pod requests a resource a
// class backs.
func asksAny(p *v1.Pod, classes Classes) bool {
	for _, cs := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			for name := range cs[i].Resources.Requests {
				if classes.For(name) != nil {
					return true
				}
			}
		}
	}
	return false
}

// check refuses a request no ResourceClaim can hold.
func (r *Request) check(p *v1.Pod) error {
	total := int64(0)
	for _, q := range r.Requests {
		total += q.Exactly.Count
	}
	switch {
	case len(r.Requests) > resourceapi.DeviceRequestsMaxSize:
		return fmt.Errorf("pod %s/%s: its extended resources backed by DRA (%s) make %d device requests, more than the %d one ResourceClaim holds: %w",
			p.Namespace, p.Name, namesOf(r.Names), len(r.Requests), resourceapi.DeviceRequestsMaxSize, placement.ErrUnsupported)
	case total > resourceapi.AllocationResultsMaxSize:
		return fmt.Errorf("pod %s/%s: its extended resources backed by DRA (%s) ask for %d devices, more than the %d one ResourceClaim holds: %w",
			p.Namespace, p.Name, namesOf(r.Names), total, resourceapi.AllocationResultsMaxSize, placement.ErrUnsupported)
	}
	return nil
}

func namesOf(names []v1.ResourceName) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}

// resourceRequests are one resource's requests and mappings over the
// pod's containers (init containers first; nInit of them).
func resourceRequests(containers []v1.Container, nInit int, name v1.ResourceName, class string) ([]resourceapi.DeviceRequest, []v1.ContainerExtendedResourceRequest) {
	long := make([]*resourceapi.DeviceRequest, len(containers)) // by container index; nil: none
	var out []resourceapi.DeviceRequest
	var longMaps, shortMaps []v1.ContainerExtendedResourceRequest
	var short []int
	for i := range containers {
		c := &containers[i]
		if i < nInit && (c.RestartPolicy == nil || *c.RestartPolicy != v1.ContainerRestartPolicyAlways) {
			short = append(short, i)
			continue
		}
		if n := quantity(c, name); n > 0 {
			long[i] = newRequest(c, i, name, class, n)
			longMaps = append(longMaps, mapping(c, name, long[i].Name))
		}
	}
	var largest *resourceapi.DeviceRequest
	own := map[string]bool{} // the short-lived containers' own requests
	for _, i := range short {
		c := &containers[i]
		need := quantity(c, name)
		if need == 0 {
			continue
		}
		for _, lr := range long[i:] {
			if lr == nil || need <= 0 {
				continue
			}
			shortMaps = append(shortMaps, mapping(c, name, lr.Name))
			need -= lr.Exactly.Count
		}
		if need <= 0 {
			continue
		}
		req := newRequest(c, i, name, class, need)
		own[req.Name] = true
		shortMaps = append(shortMaps, mapping(c, name, req.Name))
		if largest == nil || req.Exactly.Count > largest.Exactly.Count {
			largest = req
		}
	}
	if largest != nil {
		out = append(out, *largest)
		for i := range shortMaps {
			if own[shortMaps[i].RequestName] {
				shortMaps[i].RequestName = largest.Name
			}
		}
	}
	for _, lr := range long {
		if lr != nil {
			out = append(out, *lr)
		}
	}
	return out, append(longMaps, shortMaps...)
}

// quantity is a container's request of name as a whole number (0: none).
func quantity(c *v1.Container, name v1.ResourceName) int64 {
	q, ok := c.Resources.Requests[name]
	if !ok {
		return 0
	}
	n, ok := q.AsInt64()
	if !ok || n < 0 {
		return 0
	}
	return n
}

// newRequest is container i's request of count devices of class for name:
// container-<i>-request-<j>, j the index of name among the container's
// requests sorted by name.
func newRequest(c *v1.Container, i int, name v1.ResourceName, class string, count int64) *resourceapi.DeviceRequest {
	keys := make([]v1.ResourceName, 0, len(c.Resources.Requests))
	for k := range c.Resources.Requests {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return &resourceapi.DeviceRequest{
		Name: fmt.Sprintf("container-%d-request-%d", i, slices.Index(keys, name)),
		Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: class,
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           count,
		},
	}
}

func mapping(c *v1.Container, name v1.ResourceName, request string) v1.ContainerExtendedResourceRequest {
	return v1.ContainerExtendedResourceRequest{ContainerName: c.Name, ResourceName: string(name), RequestName: request}
}
