package membership

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/report"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// fakeLookup is a table of objects: "<kind>/<name>" → (uid, controller).
type fakeLookup struct {
	objs   map[string]obj
	groups map[types.UID][]string
	synced bool
}

type obj struct {
	uid        types.UID
	controller *metav1.OwnerReference
}

func (f *fakeLookup) ControllerOf(_ string, ref metav1.OwnerReference) (*metav1.OwnerReference, bool) {
	o, ok := f.objs[ref.Kind+"/"+ref.Name]
	if !ok || o.uid != ref.UID {
		return nil, false
	}
	return o.controller, true
}
func (f *fakeLookup) GroupsOf(_ string, uid types.UID) []string { return f.groups[uid] }
func (f *fakeLookup) HasSynced() bool                           { return f.synced }

func ref(kind, name string, uid types.UID) *metav1.OwnerReference {
	return &metav1.OwnerReference{APIVersion: "x/v1", Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}
}

func pod(name string, owner *metav1.OwnerReference) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return p
}

// lookup: JobSet js (uid S) → Job j (uid J); LWS l (uid L) → StatefulSet
// leader (uid LS) → leader pod (uid LP) → StatefulSet workers (uid WS); a
// Job with the JobSet's name but another UID (a stale one).
func lookup() *fakeLookup {
	return &fakeLookup{synced: true, objs: map[string]obj{
		"Job/j":              {uid: "J", controller: ref("JobSet", "js", "S")},
		"StatefulSet/leader": {uid: "LS", controller: ref("LeaderWorkerSet", "l", "L")},
		"Pod/l-0":            {uid: "LP", controller: ref("StatefulSet", "leader", "LS")},
		"StatefulSet/l-0":    {uid: "WS", controller: ref("Pod", "l-0", "LP")},
		"Job/plain":          {uid: "P"},
	}, groups: map[types.UID][]string{"S": {"jobset.js.w"}}}
}

func group(owner types.UID) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns",
		Labels:          map[string]string{vocab.LabelManagedBy: vocab.ManagedByGrouper},
		Annotations:     map[string]string{vocab.AnnotationMemberOwnerUID: string(owner)},
		OwnerReferences: []metav1.OwnerReference{*ref("JobSet", "js", owner)}}}
}

// TestAdmit: a pod whose controller chain leads to the group's owner is a
// member (JobSet through its Job; a LWS worker through its StatefulSet,
// leader pod and leader StatefulSet); a pod with forged labels only, a
// chain to another workload, a reference with a stale UID or one that
// ends early is not, and gets one event; groups not the grouper's, and
// any group before the informers synced, admit everyone.
func TestAdmit(t *testing.T) {
	cases := []struct {
		name  string
		pg    *schedulingv1beta1.PodGroup
		pod   *v1.Pod
		sync  bool
		admit bool
		chain string
	}{
		{"jobset member", group("S"), pod("a", ref("Job", "j", "J")), true, true, ""},
		{"lws worker", group("L"), pod("w", ref("StatefulSet", "l-0", "WS")), true, true, ""},
		{"lws leader", group("L"), pod("l-0", ref("StatefulSet", "leader", "LS")), true, true, ""},
		{"direct", group("R"), pod("h", ref("RayCluster", "rc", "R")), true, true, ""},
		{"no controller", group("S"), pod("forged", nil), true, false, "none"},
		{"another workload", group("S"), pod("x", ref("Job", "plain", "P")), true, false, `Job "plain"`},
		{"stale uid", group("S"), old(pod("y", ref("Job", "j", "OTHER"))), true, false, `Job "j" (not found)`},
		{"not the grouper's", &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "g"}}, pod("z", nil), true, true, ""},
		{"not synced", group("S"), pod("early", nil), false, true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := lookup()
			l.synced = tc.sync
			rec := events.NewFakeRecorder(10)
			g := New(l, report.New(rec))
			if got, recheck := g.Admit(tc.pg, tc.pod); got != tc.admit || recheck != 0 {
				t.Fatalf("Admit = %v, %v; want %v, 0", got, recheck, tc.admit)
			}
			g.Admit(tc.pg, tc.pod) // a second time: no second event
			notes := drain(rec)
			switch {
			case tc.admit && len(notes) > 0:
				t.Errorf("events %q for an admitted pod", notes)
			case !tc.admit && (len(notes) != 1 || !strings.Contains(notes[0], tc.chain) || !strings.Contains(notes[0], "JobSet js") || !strings.Contains(notes[0], vocab.EventNotGroupMember)):
				t.Errorf("events %q; want one %s naming %q and the JobSet", notes, vocab.EventNotGroupMember, tc.chain)
			}
		})
	}
}

// TestAdmitUnseenOwner: a pod whose chain ends at an owner the informers
// have not seen is not a member; while it is younger than OwnerGrace it
// gets no event and a recheck (the informers may lag the controller that
// made it). Once its Job is seen it is a member without any event; a Job
// never seen gets the event once the grace has passed, naming it not found.
func TestAdmitUnseenOwner(t *testing.T) {
	created := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(created.Add(2 * time.Second))
	l := lookup()
	rec := events.NewFakeRecorder(10)
	g := New(l, report.New(rec))
	g.clock = clk
	fresh := pod("fresh", ref("Job", "new", "N"))
	fresh.CreationTimestamp = metav1.NewTime(created)
	if ok, recheck := g.Admit(group("S"), fresh); ok || recheck != UnseenRecheck {
		t.Fatalf("unseen owner in the grace: Admit = %v, %v; want false, %v", ok, recheck, UnseenRecheck)
	}
	if notes := drain(rec); len(notes) > 0 {
		t.Fatalf("events in the grace: %q", notes)
	}
	l.objs["Job/new"] = obj{uid: "N", controller: ref("JobSet", "js", "S")}
	if ok, recheck := g.Admit(group("S"), fresh); !ok || recheck != 0 {
		t.Fatalf("owner seen: Admit = %v, %v; want true, 0", ok, recheck)
	}
	ghost := pod("ghost", ref("Job", "gone", "G"))
	ghost.CreationTimestamp = metav1.NewTime(created)
	clk.SetTime(created.Add(OwnerGrace))
	if ok, recheck := g.Admit(group("S"), ghost); ok || recheck != 0 {
		t.Fatalf("after the grace: Admit = %v, %v; want false, 0", ok, recheck)
	}
	if notes := drain(rec); len(notes) != 1 || !strings.Contains(notes[0], `Job "gone" (not found)`) {
		t.Fatalf("after the grace: events %q; want one naming the Job not found", notes)
	}
}

// old is p made an hour ago: past OwnerGrace.
func old(p *v1.Pod) *v1.Pod {
	p.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	return p
}

// TestHint: a lone pod controlled (through its Job) by a grouped JobSet is
// told that its labels lack what the policy reads; an opted-out pod and a
// pod of no grouped workload get gangless's answer.
func TestHint(t *testing.T) {
	g := New(lookup(), nil)
	h, ok := g.Hint(pod("renamed", ref("Job", "j", "J")))
	if !ok || !strings.Contains(h.Message, "PodGroup jobset.js.w") || !strings.Contains(h.Message, `Job "j" → JobSet "js"`) {
		t.Errorf("Hint = %+v, %v", h, ok)
	}
	out := pod("out", ref("Job", "j", "J"))
	out.Annotations = map[string]string{"gpufabric.dev/gang": "false"}
	if h, ok := g.Hint(out); ok {
		t.Errorf("opted-out pod got %+v", h)
	}
	indexed := pod("i", ref("Job", "plain", "P"))
	indexed.Labels = map[string]string{"batch.kubernetes.io/job-completion-index": "2"}
	if h, ok := g.Hint(indexed); !ok || h.Source != "Indexed Job" {
		t.Errorf("Indexed Job pod: %+v, %v; want gangless's hint", h, ok)
	}
	var nilGuard *Guard
	if ok, _ := nilGuard.Admit(group("S"), pod("p", nil)); !ok {
		t.Error("nil guard refused a pod")
	}
}

// drain returns the events recorded so far.
func drain(r *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}
