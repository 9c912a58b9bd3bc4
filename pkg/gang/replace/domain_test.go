package replace

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// tree is the fabric tree of nodes n1, n2 (NVLink domain nvl-a) and n3
// (nvl-b).
func tree(t *testing.T) func() (*topology.Tree, error) {
	t.Helper()
	var nodes []*v1.Node
	var ss []*resourceapi.ResourceSlice
	for name, dom := range map[string]string{"n1": "nvl-a", "n2": "nvl-a", "n3": "nvl-b"} {
		nodes = append(nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		ss = append(ss, &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: resourceapi.ResourceSliceSpec{Driver: topology.DriverName, NodeName: ptr.To(name),
				Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1},
				Devices: []resourceapi.Device{{Name: topology.GPUDeviceName(0), Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					topology.AttrType: {StringValue: ptr.To(topology.DeviceTypeGPU)}, topology.AttrNVLinkDomain: {StringValue: ptr.To(dom)}}}}}})
	}
	tr, err := topology.BuildTree(topology.TreeConfig{}, nodes, ss)
	if err != nil {
		t.Fatal(err)
	}
	return func() (*topology.Tree, error) { return tr, nil }
}

// TestPreviousDomainSurvivesRestart: a whole gang restarted at once
// writes its previous NVLink domain into its MembersLost condition; a new
// Replacer (a scheduler restart or a new leader: no memory) given that
// condition prefers that domain's nodes and, with policy Wait or Fail,
// keeps the gang there (Stays), as the first one did; Restart lets it go.
func TestPreviousDomainSurvivesRestart(t *testing.T) {
	for _, policy := range []string{"Restart", "Wait", "Fail"} {
		t.Run(policy, func(t *testing.T) {
			lost, ok := member("train-1", "n2"), member("train-0", "n1")
			g := newRig(t, lost, ok)
			g.r.d.Tree = tree(t)
			pg := podGroup(true, map[string]string{vocab.AnnotationOnMemberLoss: policy})
			g.clock.SetTime(t0.Add(time.Second))
			out, err := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Losses: []Loss{{Pod: lost, Trigger: NodeTainted, Since: t0, Why: "train-1 on node n2, tainted"}},
				Running: []*v1.Pod{ok}, Expected: 2, Cond: baseCond(metav1.ConditionTrue)})
			if err != nil || !strings.Contains(out.Cond.Message, `previous NVLink domain "nvl-a"`) {
				t.Fatalf("condition %q, %v", out.Cond.Message, err)
			}
			before := g.r.Stays(key, pg)

			fresh := newRig(t)
			fresh.r.d.Tree = tree(t)
			fresh.clock.SetTime(t0.Add(20 * time.Second))
			pg.Status.Conditions = []metav1.Condition{out.Cond}
			turn := Turn{Key: key, PodGroup: pg, Pending: []*v1.Pod{member("train-0b", ""), member("train-1b", "")}, Expected: 2, Cond: baseCond(metav1.ConditionTrue)}
			out2, err := fresh.r.Turn(t.Context(), turn)
			if err != nil || !strings.Contains(out2.Cond.Message, `previous NVLink domain "nvl-a"`) {
				t.Fatalf("after the restart: condition %q, %v", out2.Cond.Message, err)
			}
			if got := fresh.r.Prefer(key); !slices.Equal(got, []string{"n1", "n2"}) {
				t.Errorf("prefer %v after the restart, want the nodes of nvl-a", got)
			}
			after := fresh.r.Stays(key, pg)
			if after != before || (policy == "Restart") != (after == "") {
				t.Errorf("stays %q after the restart, %q before", after, before)
			}
			if policy != "Restart" && out2.RetryIn != 40*time.Second {
				t.Errorf("retry in %s, want the bound from the loss", out2.RetryIn)
			}
		})
	}
}

// TestDomainIn: the previous domain is read back bounded; a forged, too
// long or unquoted one is none.
func TestDomainIn(t *testing.T) {
	long := strings.Repeat("x", maxDomainID+1)
	for msg, want := range map[string]string{
		`a; previous NVLink domain "nvl-a"; next`:   "nvl-a",
		`a; previous NVLink domain "` + long + `"`:  "",
		`a; previous NVLink domain nvl-a`:           "",
		`a; previous NVLink domain ""`:              "",
		`a; previous NVLink domain "nvl-a`:          "",
		`waits for room in its previous domain "x"`: "",
		`none`: "",
	} {
		if got := domainIn(msg); got != want {
			t.Errorf("domainIn(%q) = %q, want %q", msg, got, want)
		}
	}
}

// TestPreviousDomainUnknown: without a tree, or when the members ran in
// several NVLink domains, no domain is written and a new Replacer
// prefers nothing (the gang goes wherever it fits best, as before).
func TestPreviousDomainUnknown(t *testing.T) {
	for name, tr := range map[string]func() (*topology.Tree, error){
		"no tree":     nil,
		"tree error":  func() (*topology.Tree, error) { return nil, errors.New("boom") },
		"two domains": tree(t),
	} {
		t.Run(name, func(t *testing.T) {
			lost, a, b := member("train-2", "n2"), member("train-0", "n1"), member("train-1", "n3")
			g := newRig(t, lost, a, b)
			g.r.d.Tree = tr
			pg := podGroup(true, map[string]string{vocab.AnnotationOnMemberLoss: "Wait"})
			out, err := g.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Losses: []Loss{{Pod: lost, Trigger: NodeTainted, Since: t0, Why: "train-2 on node n2, tainted"}},
				Running: []*v1.Pod{a, b}, Expected: 3, Cond: baseCond(metav1.ConditionTrue)})
			if err != nil || strings.Contains(out.Cond.Message, "NVLink domain") {
				t.Fatalf("condition %q, %v", out.Cond.Message, err)
			}
			if len(g.r.Prefer(key)) == 0 {
				t.Error("the running members' nodes are no longer preferred in memory")
			}
			fresh := newRig(t)
			fresh.r.d.Tree = tr
			pg.Status.Conditions = []metav1.Condition{out.Cond}
			if _, err := fresh.r.Turn(t.Context(), Turn{Key: key, PodGroup: pg, Expected: 3, Cond: baseCond(metav1.ConditionTrue)}); err != nil {
				t.Fatal(err)
			}
			if p, s := fresh.r.Prefer(key), fresh.r.Stays(key, pg); p != nil || s != "" {
				t.Errorf("prefer %v, stays %q after the restart", p, s)
			}
		})
	}
}
