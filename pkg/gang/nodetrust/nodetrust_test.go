package nodetrust

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

type event struct{ node, eventType, reason, note string }

type recorder struct{ got []event }

func (r *recorder) Event(obj runtime.Object, eventType, reason, _, note string) {
	r.got = append(r.got, event{obj.(*v1.Node).Name, eventType, reason, note})
}

// world is nodes whose slices say nvlinkDomain claimed[node] and whose
// admin label says label[node].
type world struct {
	claimed, label map[string]string
}

func (w *world) tree(t *testing.T) *topology.Tree {
	t.Helper()
	var nodes []*v1.Node
	var slices []*resourceapi.ResourceSlice
	for name, d := range w.claimed {
		labels := map[string]string{}
		if l, ok := w.label[name]; ok {
			labels[topology.LabelAdminNVLinkDomain] = l
		}
		nodes = append(nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
		typ := topology.DeviceTypeGPU
		slices = append(slices, &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
			Driver: topology.DriverName, NodeName: &name, Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				topology.AttrType: {StringValue: &typ}, topology.AttrNVLinkDomain: {StringValue: &d},
			}}},
		}})
	}
	tree, err := topology.BuildTree(topology.TreeConfig{}, nodes, slices)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func (w *world) node(name string) (*v1.Node, error) {
	if _, ok := w.claimed[name]; !ok {
		return nil, fmt.Errorf("node %s not found", name)
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}, nil
}

// TestObserve: a contradiction is told once, on its Node, naming both
// domains; the same tree again, or a new tree with the same
// contradiction, tells nothing; a node whose claim keeps changing is told
// again only after MinInterval; one that agrees again is forgotten; and
// one tree tells at most MaxEventsPerTree nodes, the rest with the next.
func TestObserve(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	now := time.Unix(1000, 0)
	rec := &recorder{}
	w := &world{claimed: map[string]string{"a1": "A", "a2": "A", "intruder": "A"}, label: map[string]string{"a1": "A", "intruder": "B"}}
	r := New(rec, w.node, func() time.Time { return now })
	tree := w.tree(t)
	r.Observe(ctx, tree)
	r.Observe(ctx, tree)
	r.Observe(ctx, w.tree(t))
	if len(rec.got) != 1 {
		t.Fatalf("events %+v, want one", rec.got)
	}
	e := rec.got[0]
	if e.node != "intruder" || e.eventType != v1.EventTypeWarning || e.reason != vocab.EventNodeFabricRefused ||
		!strings.Contains(e.note, `publishes GPUs in NVLink domain A, but its label node-restriction.kubernetes.io/gpufabric.nvlink-domain says "B"`) {
		t.Errorf("event %+v", e)
	}

	w.claimed["intruder"] = "C" // a new reason, too soon
	r.Observe(ctx, w.tree(t))
	now = now.Add(MinInterval)
	r.Observe(ctx, w.tree(t))
	if len(rec.got) != 2 || !strings.Contains(rec.got[1].note, "domain C") {
		t.Errorf("after a changed claim: events %+v, want a second one naming C after MinInterval", rec.got)
	}

	w.claimed["intruder"] = "B" // agrees now: forgotten, told again if it lies again
	r.Observe(ctx, w.tree(t))
	w.claimed["intruder"] = "A"
	r.Observe(ctx, w.tree(t))
	if len(rec.got) != 3 {
		t.Errorf("a node refused again after it agreed: %d events, want 3", len(rec.got))
	}

	rec.got = nil
	for i := range MaxEventsPerTree + 5 {
		name := fmt.Sprintf("liar-%02d", i)
		w.claimed[name], w.label[name] = "A", "Z"
	}
	r.Observe(ctx, w.tree(t))
	if len(rec.got) != MaxEventsPerTree {
		t.Errorf("one tree told %d nodes, want MaxEventsPerTree %d", len(rec.got), MaxEventsPerTree)
	}
	r.Observe(ctx, w.tree(t))
	if len(rec.got) != MaxEventsPerTree+5 {
		t.Errorf("the next tree told %d more, want the 5 left", len(rec.got)-MaxEventsPerTree)
	}
	if len(r.told) != MaxEventsPerTree+6 {
		t.Errorf("remembers %d nodes, want the %d refused", len(r.told), MaxEventsPerTree+6)
	}
	var nilReporter *Reporter
	nilReporter.Observe(ctx, tree) // no reporter, no panic
}
