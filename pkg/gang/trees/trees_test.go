package trees

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// world builds a Reader over composites and PodGroups.
type world struct {
	composites map[string]*schedulingv1alpha3.CompositePodGroup
	cIdx, pIdx cache.Indexer
	at         int
}

func newWorld() *world {
	return &world{composites: map[string]*schedulingv1alpha3.CompositePodGroup{},
		cIdx: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{ParentIndex: IndexByParent}),
		pIdx: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{ParentIndex: IndexByParent})}
}

func (w *world) Get(ns, name string) (*schedulingv1alpha3.CompositePodGroup, error) {
	if c := w.composites[ns+"/"+name]; c != nil {
		return c, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "compositepodgroups"}, name)
}

func (w *world) reader() *Reader {
	return &Reader{Composites: w, CompositeChildren: w.cIdx, PodGroupChildren: w.pIdx}
}

func (w *world) meta(name string) metav1.ObjectMeta {
	w.at++
	return metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(time.Unix(int64(1000-w.at), 0))}
}

func (w *world) composite(name, parent, workload string, min int32) *schedulingv1alpha3.CompositePodGroup {
	c := &schedulingv1alpha3.CompositePodGroup{ObjectMeta: w.meta(name)}
	if parent != "" {
		c.Spec.ParentCompositePodGroupName = &parent
	}
	c.Spec.WorkloadRef = &schedulingv1alpha3.WorkloadReference{WorkloadName: workload}
	if min > 0 {
		c.Spec.SchedulingPolicy.Gang = &schedulingv1alpha3.CompositeGangSchedulingPolicy{MinGroupCount: min}
	}
	w.composites["ns/"+name] = c
	if err := w.cIdx.Add(c); err != nil {
		panic(err)
	}
	return c
}

func (w *world) podGroup(name, parent, workload string, min int32) *schedulingv1beta1.PodGroup {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: w.meta(name)}
	pg.Spec.ParentCompositePodGroupName = &parent
	pg.Spec.WorkloadRef = &schedulingv1beta1.WorkloadReference{WorkloadName: workload}
	pg.Spec.SchedulingPolicy.Gang = &schedulingv1beta1.GangSchedulingPolicy{MinCount: min}
	if err := w.pIdx.Add(pg); err != nil {
		panic(err)
	}
	return pg
}

// TestRead: a tree read whole, children in creation order (composites
// first); invalid trees are refused naming the object and the field.
func TestRead(t *testing.T) {
	w := newWorld()
	root := w.composite("job", "", "wl", 2)
	w.composite("replica-b", "job", "wl", 0)
	w.composite("replica-a", "job", "wl", 0)
	w.podGroup("b-workers", "replica-b", "wl", 2)
	w.podGroup("a-workers", "replica-a", "wl", 2)
	w.podGroup("a-leader", "replica-a", "wl", 1)
	w.podGroup("frontend", "job", "wl", 1)
	tr, err := w.reader().Read(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range tr.Leaves {
		names = append(names, l.PodGroup.Name)
	}
	// meta() makes later objects older: replica-a before replica-b,
	// a-leader before a-workers.
	if got := strings.Join(names, ","); got != "a-leader,a-workers,b-workers,frontend" {
		t.Errorf("leaves %s", got)
	}
	if root, err := w.reader().RootOf("ns", "replica-a"); err != nil || root != "job" {
		t.Errorf("RootOf(replica-a) = %q, %v", root, err)
	}

	tests := []struct {
		name  string
		build func(w *world) *schedulingv1alpha3.CompositePodGroup
		want  string
	}{
		{"two workloads", func(w *world) *schedulingv1alpha3.CompositePodGroup {
			r := w.composite("r", "", "wl", 0)
			w.podGroup("p", "r", "other", 1)
			return r
		}, `spec.workloadRef names workload "other"`},
		{"too deep", func(w *world) *schedulingv1alpha3.CompositePodGroup {
			r := w.composite("l1", "", "wl", 0)
			w.composite("l2", "l1", "wl", 0)
			w.composite("l3", "l2", "wl", 0)
			w.composite("l4", "l3", "wl", 0)
			return r
		}, "composites deeper than 3 levels"},
		{"too many children", func(w *world) *schedulingv1alpha3.CompositePodGroup {
			r := w.composite("r", "", "wl", 0)
			for i := range 65 {
				w.podGroup(fmt.Sprintf("p%d", i), "r", "wl", 1)
			}
			return r
		}, "65 children, at most 64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld()
			_, err := w.reader().Read(tt.build(w))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want ErrInvalid naming %q", err, tt.want)
			}
		})
	}
}

// TestRootOf: a cycle and a missing parent are told apart.
func TestRootOf(t *testing.T) {
	w := newWorld()
	w.composite("a", "b", "wl", 0)
	w.composite("b", "a", "wl", 0)
	if _, err := w.reader().RootOf("ns", "a"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cycle") {
		t.Errorf("cycle: %v", err)
	}
	if _, err := w.reader().RootOf("ns", "gone"); !errors.Is(err, ErrMissing) {
		t.Errorf("missing parent: %v", err)
	}
}

// TestReady: gates hold the whole tree; composites need minGroupCount
// ready children, leaves minCount pods; Group leaves out what is not
// ready.
func TestReady(t *testing.T) {
	w := newWorld()
	root := w.composite("job", "", "wl", 2)
	w.podGroup("a", "job", "wl", 2)
	w.podGroup("b", "job", "wl", 2)
	w.podGroup("c", "job", "wl", 1)
	tr, err := w.reader().Read(root)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]Count{"a": {All: 2}, "b": {All: 1}, "c": {All: 1}}
	count := func(pg *schedulingv1beta1.PodGroup) Count { return counts[pg.Name] }
	if ok, why := tr.Ready(count); !ok {
		t.Errorf("2 of 3 children ready, minGroupCount 2: not ready: %s", why)
	}
	counts["c"] = Count{}
	if ok, why := tr.Ready(count); ok || !strings.Contains(why, "1 of minGroupCount 2 children ready") {
		t.Errorf("1 of 3 ready: %v %q", ok, why)
	}
	counts["c"] = Count{All: 1, Gated: 1}
	if ok, why := tr.Ready(count); ok || !strings.Contains(why, "scheduling gates") {
		t.Errorf("a gated pod: %v %q", ok, why)
	}
	counts["c"] = Count{All: 1}
	g, err := tr.Group(func(pg *schedulingv1beta1.PodGroup) (*placement.Gang, error) {
		if counts[pg.Name].All < MinCount(pg) {
			return nil, nil
		}
		return &placement.Gang{Name: pg.Name}, nil
	})
	if err != nil || len(g.Children) != 2 || g.MinGroupCount != 2 {
		t.Fatalf("group %+v, %v: want the two ready children, minGroupCount 2", g, err)
	}
}

// TestGroupRailCoupling: Group carries each object's
// gpufabric.dev/rail-coupling (the search validates the value), and a
// PodGroup that says rail-alignment: preferred under a required coupling
// (its own none takes it out) makes the tree invalid, naming both
// annotations.
func TestGroupRailCoupling(t *testing.T) {
	tests := map[string]struct {
		root, inner, pg map[string]string // annotations
		wantErr         bool
		want            [3]string // RailCoupling of root, inner, leaf
	}{
		"carried": {root: map[string]string{topology.AnnotationRailCoupling: "required"}, inner: map[string]string{topology.AnnotationRailCoupling: "none"},
			want: [3]string{"required", "none", ""}},
		"a bad value is carried for the search to refuse": {root: map[string]string{topology.AnnotationRailCoupling: "yes"}, want: [3]string{"yes", "", ""}},
		"preferred alignment under required coupling": {root: map[string]string{topology.AnnotationRailCoupling: "required"},
			pg: map[string]string{topology.AnnotationRailAlignment: "preferred"}, wantErr: true},
		"preferred alignment, opted out": {root: map[string]string{topology.AnnotationRailCoupling: "required"},
			pg:   map[string]string{topology.AnnotationRailAlignment: "preferred", topology.AnnotationRailCoupling: "none"},
			want: [3]string{"required", "", "none"}},
		"preferred alignment under a composite that opted out": {root: map[string]string{topology.AnnotationRailCoupling: "required"},
			inner: map[string]string{topology.AnnotationRailCoupling: "none"}, pg: map[string]string{topology.AnnotationRailAlignment: "preferred"},
			want: [3]string{"required", "none", ""}},
		"preferred alignment under preferred coupling": {root: map[string]string{topology.AnnotationRailCoupling: "preferred"},
			pg: map[string]string{topology.AnnotationRailAlignment: "preferred"}, want: [3]string{"preferred", "", ""}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld()
			root := w.composite("job", "", "wl", 1)
			root.Annotations = tc.root
			w.composite("inner", "job", "wl", 1).Annotations = tc.inner
			w.podGroup("pg", "inner", "wl", 1).Annotations = tc.pg
			tr, err := w.reader().Read(root)
			if err != nil {
				t.Fatal(err)
			}
			g, err := tr.Group(func(pg *schedulingv1beta1.PodGroup) (*placement.Gang, error) {
				return &placement.Gang{Name: pg.Name}, nil
			})
			if tc.wantErr {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), topology.AnnotationRailAlignment) || !strings.Contains(err.Error(), topology.AnnotationRailCoupling) {
					t.Errorf("error %v, want ErrInvalid naming both annotations", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := [3]string{g.RailCoupling, g.Children[0].RailCoupling, g.Children[0].Children[0].RailCoupling}; got != tc.want {
				t.Errorf("couplings %q, want %q", got, tc.want)
			}
		})
	}
}
