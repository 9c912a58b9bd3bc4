package evict

import (
	"strings"
	"testing"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/index"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"github.com/gpufabric/gpufabric/pkg/gang/preemption"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// starvingWorld is three NVLink domains of two 4-GPU nodes and a gang of
// two 4-GPU pods (one whole domain), refused for an hour, with a
// starvation bound of a minute.
type starvingWorld struct {
	e     *Evictor
	input index.SnapshotInput
	gang  *placement.Gang
}

func newStarvingWorld(t *testing.T, perNamespace int) *starvingWorld {
	var domains []scenario.DomainSpec
	for _, id := range []string{"a", "b", "c"} {
		domains = append(domains, scenario.DomainSpec{ID: id, Nodes: 2, GPUsPerNode: 4})
	}
	b, err := scenario.Build(scenario.Scenario{Domains: domains,
		Gangs: []scenario.GangSpec{{Name: "big", Pods: 2, GPUsPerPod: 4, TopologyKey: topology.TopologyKeyNVLinkDomain}}})
	if err != nil {
		t.Fatal(err)
	}
	claims := resourcelisters.NewResourceClaimLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	e := New(Config{Placement: b.Config, Claims: claims, Gangs: &fakeGangs{}, DisablePreemption: true,
		StarvationBound: time.Minute, StarvationReservationsPerNamespace: perNamespace})
	return &starvingWorld{e: e, input: b.Input, gang: b.Gangs[0]}
}

// attempt is PodGroup ns/name, refused for an hour.
func (w *starvingWorld) attempt(ns, name string) *Attempt {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name),
		CreationTimestamp: metav1.NewTime(time.Now().Add(-2 * time.Hour))}}
	meta.SetStatusCondition(&pg.Status.Conditions, metav1.Condition{Type: vocab.ConditionInitiallyScheduled, Status: metav1.ConditionFalse,
		Reason: vocab.ReasonUnschedulable, LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))})
	return &Attempt{Key: vocab.PodGroupKey(ns, name), PodGroup: pg}
}

// refuse runs the evict room after a refusal of a, on the cluster less
// the nodes other gangs hold against it (as the loop does).
func (w *starvingWorld) refuse(t *testing.T, a *Attempt) string {
	t.Helper()
	msg, err := w.e.AfterRefusal(t.Context(), a, w.gang, preemption.WithoutNodes(w.input, w.e.Held(a)))
	if err != nil {
		t.Fatalf("AfterRefusal %s: %v", a.Key, err)
	}
	return msg
}

// TestStarvationReservationsPerNamespace: a namespace's starving gangs
// hold at most --starvation-reservations-per-namespace domains; its other
// starving gangs say why they hold none, and another namespace's gang
// still reserves one of the domains left. Before, one tenant's starving
// gangs could hold every domain.
func TestStarvationReservationsPerNamespace(t *testing.T) {
	for _, tc := range []struct {
		name         string
		perNamespace int
		wantTenantA  int // reservations of team-a's three gangs
	}{
		{name: "default: one per namespace", perNamespace: 0, wantTenantA: 1},
		{name: "two per namespace", perNamespace: 2, wantTenantA: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newStarvingWorld(t, tc.perNamespace)
			holding := 0
			for _, name := range []string{"a-0", "a-1", "a-2"} {
				msg := w.refuse(t, w.attempt("team-a", name))
				switch {
				case strings.Contains(msg, "holding "):
					holding++
				case !strings.Contains(msg, "holds no domain: other gangs of namespace team-a hold its limit of starvation reservations"):
					t.Errorf("%s: message %q", name, msg)
				}
			}
			if holding != tc.wantTenantA {
				t.Errorf("team-a holds %d domains, want %d", holding, tc.wantTenantA)
			}
			if msg := w.refuse(t, w.attempt("team-b", "b-0")); !strings.Contains(msg, "holding ") {
				t.Errorf("team-b's starving gang reserved nothing: %q", msg)
			}
		})
	}
}

// TestHeldNoteNamesReservations: a gang refused while other gangs hold
// nodes against it says how many and for what, naming neither the gangs
// nor another namespace (before, such a refusal could say only "no node
// carries this label").
func TestHeldNoteNamesReservations(t *testing.T) {
	w := newStarvingWorld(t, 1)
	if note := w.e.HeldNote(w.attempt("team-b", "b-0")); note != "" {
		t.Errorf("nothing held yet: %q", note)
	}
	w.refuse(t, w.attempt("team-a", "a-0"))
	w.refuse(t, w.attempt("team-b", "b-0"))
	note := w.e.HeldNote(w.attempt("team-b", "b-1"))
	for _, want := range []string{"4 nodes were not considered", "2 reserved for a starving gang of another namespace",
		"2 reserved for a starving gang of this namespace"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q lacks %q", note, want)
		}
	}
	if strings.Contains(note, "team-a") || strings.Contains(note, "a-0") {
		t.Errorf("note %q names another namespace's gang", note)
	}
	if own := w.e.HeldNote(w.attempt("team-a", "a-0")); !strings.Contains(own, "2 nodes were not considered") || strings.Contains(own, "this namespace") {
		t.Errorf("the reserving gang's own note: %q", own)
	}
}
