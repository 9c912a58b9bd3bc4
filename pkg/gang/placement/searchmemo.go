package placement

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
)

// searchMemo is what the searches of one Place call remember about nodes
// (search.go); nodeMemo what one search remembers per node position.
//
// Rules: a node's device class names its free devices (what the allocator
// may give the gang there: not allocated, not taken by the shared claims),
// as the devices' content without their names; nodes that a cluster-level
// pool of the claims' classes reaches, or whose devices share counters or
// allow several allocations, get no class (-1) and are never memoized,
// since what they can give depends on more than their own devices. For a
// node with a class, Allocate's answer depends only on the class and the
// claims of its members (the gang's own, or their rail-restricted copies:
// the variant), so a refused set of shapes is refused on every node of the
// class, and results are reused for the same node, class and shapes, in
// every domain and level the Place call verifies.
type searchMemo struct {
	classes map[string]int
	refused map[string]bool                           // variant/device class/sorted shapes
	results map[string][]resourceapi.AllocationResult // variant/node/device class/shapes in member order
}

func newSearchMemo() *searchMemo {
	return &searchMemo{classes: map[string]int{}, refused: map[string]bool{}, results: map[string][]resourceapi.AllocationResult{}}
}

// nodeMemo holds one search's device and equivalence classes per node
// position (unknownClass before the first use).
type nodeMemo struct {
	sharedIDs sets.Set[structured.DeviceID]
	devID     []int
	eqID      []int
}

const unknownClass = -2

func newNodeMemo(nodes int, shared []resourceapi.AllocationResult) nodeMemo {
	m := nodeMemo{sharedIDs: sets.New[structured.DeviceID](), devID: make([]int, nodes), eqID: make([]int, nodes)}
	for i := range nodes {
		m.devID[i], m.eqID[i] = unknownClass, unknownClass
	}
	for _, r := range shared {
		for _, d := range r.Devices.Results {
			m.sharedIDs.Insert(structured.MakeDeviceID(d.Driver, d.Pool, d.Device))
		}
	}
	return m
}

// intern numbers a key (-1 for "").
func (m *searchMemo) intern(key string) int {
	if key == "" {
		return -1
	}
	id, ok := m.classes[key]
	if !ok {
		id = len(m.classes)
		m.classes[key] = id
	}
	return id
}

// keys returns the results key (variant, node, device class, shapes in
// member order) and the refusal key (variant, device class, sorted
// shapes); "" for both when the node has no class.
func keys(variant string, node, dev int, ids []int, members []int) (string, string) {
	if dev < 0 {
		return "", ""
	}
	shapes := make([]int, len(members))
	for i, mi := range members {
		shapes[i] = ids[mi]
	}
	seq := variant + "|" + strconv.Itoa(node) + "|" + strconv.Itoa(dev) + ":" + intsKey(shapes)
	sort.Ints(shapes)
	return seq, variant + "|" + strconv.Itoa(dev) + ":" + intsKey(shapes)
}

func intsKey(v []int) string {
	var b strings.Builder
	for i, n := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(n))
	}
	return b.String()
}

// devClass returns the device class of the node at pos (-1: none).
func (s *search) devClass(ctx context.Context, pos int) (int, error) {
	if id := s.nm.devID[pos]; id != unknownClass {
		return id, nil
	}
	key, err := s.sr.s.FreeDeviceKey(ctx, s.nodes[pos], s.classes, s.nm.sharedIDs)
	if err != nil {
		return 0, err
	}
	s.nm.devID[pos] = s.memo.intern(key)
	return s.nm.devID[pos], nil
}

// eqClass returns the equivalence class of the node at pos (-1: none):
// its device class, every shape's static check, and its allocatable,
// requests and pods. Two empty nodes of one class are interchangeable for
// the whole search.
func (s *search) eqClass(ctx context.Context, pos int) (int, error) {
	if id := s.nm.eqID[pos]; id != unknownClass {
		return id, nil
	}
	dev, err := s.devClass(ctx, pos)
	if err != nil || dev < 0 {
		s.nm.eqID[pos] = -1
		return -1, err
	}
	ns := s.nodes[pos]
	var b strings.Builder
	fmt.Fprintf(&b, "%d|%s|%s|%d", dev, resKey(ns.Allocatable()), resKey(ns.Requested()), ns.Pods())
	for id := range s.sr.distinct {
		b.WriteString("|" + s.sr.fit.staticFail(ns, id))
	}
	s.nm.eqID[pos] = s.memo.intern("eq\x00" + b.String())
	return s.nm.eqID[pos], nil
}

func resKey(r index.ResList) string {
	names := make([]string, 0, len(r))
	for n, v := range r {
		if v != 0 {
			names = append(names, string(n))
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s=%d,", n, r[v1.ResourceName(n)])
	}
	return b.String()
}
