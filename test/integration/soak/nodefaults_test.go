package soak

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// Node faults in the soak: nodes under running gangs stop heartbeating,
// get a NoExecute taint or are deleted, and members fail; the nodes are
// repaired a while later. The soak acts as the gangs' workload controller
// (it creates a lost member's pod again), and every gang hit must end
// replaced in place, restarted whole, or failed as its policy says.

const (
	// soakNodeFaultsEnv turns the node faults off ("0"); on by default.
	soakNodeFaultsEnv = "GPUFABRIC_SOAK_NODE_FAULTS"
	// The scheduler's bounds in the soak: a node NotReady for 2 s lost its
	// members; a replacement has 8 s before the gang's policy decides.
	soakNodeFailureGrace   = 2 * time.Second
	soakReplacementTimeout = 8 * time.Second
	// soakNodeMonitorGrace is kube-controller-manager's node monitor grace.
	soakNodeMonitorGrace = 6 * time.Second
	// soakBrokenNodes is how many nodes are broken at once at most.
	soakBrokenNodes = 2
	// soakHitHold keeps a gang a fault hit from being deleted (its lifetime
	// is over) until it recovered, for at most this long.
	soakHitHold = 90 * time.Second
	// soakRecoverBound: a gang a fault hit is replaced in place, restarted
	// or failed within this long (the grace, the replacement bound, the
	// kills' restarts), or it is a violation.
	soakRecoverBound = 45 * time.Second
)

// soakFaultPodFailed is the member failure among the node faults.
const soakFaultPodFailed = "pod-failed"

// nodeFaults injects and repairs node faults and follows the gangs they hit.
type nodeFaults struct {
	s *soak

	mu       sync.Mutex
	broken   map[string]brokenNode
	hits     []*faultHit
	injected map[string]int
}

type brokenNode struct {
	fault    itest.NodeFault
	repairAt time.Time
}

// faultHit is a gang a fault hit and what became of it.
type faultHit struct {
	g       *soakGang
	node    string // the node that failed ("" for a failed pod)
	at      time.Time
	fixed   time.Time            // when the node was repaired
	uids    map[string]types.UID // its pods when hit, by name
	decided time.Time            // the policy acted: replaced, restarting, failed
	ended   time.Time
	outcome string // in_place, restarted, restarting, failed, deleted, survived
}

// soakLostBy: a node broken this long has lost its members (the node
// monitor grace, the node failure grace, and slack for a kill).
const soakLostBy = soakNodeMonitorGrace + soakNodeFailureGrace + 5*time.Second

func newNodeFaults(s *soak) *nodeFaults {
	return &nodeFaults{s: s, broken: map[string]brokenNode{}, injected: map[string]int{}}
}

// run injects a fault every 5–12 s and repairs nodes when their time is up.
func (f *nodeFaults) run(ctx context.Context) {
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(5000+f.s.intn(7000)) * time.Millisecond):
		}
		f.repair(ctx, false)
		f.inject(ctx)
	}
}

// inject hits a random bound soak member: its pod fails, or its node (for
// 20–30 s, past the node monitor grace and the node failure grace).
func (f *nodeFaults) inject(ctx context.Context) {
	f.mu.Lock()
	full := len(f.broken) >= soakBrokenNodes
	f.mu.Unlock()
	pods := f.s.boundPods(ctx)
	f.mu.Lock()
	healthy := slices.DeleteFunc(slices.Clone(pods), func(p *corev1.Pod) bool { _, bad := f.broken[p.Spec.NodeName]; return bad })
	f.mu.Unlock()
	if len(healthy) == 0 {
		return
	}
	victim := healthy[f.s.intn(len(healthy))]
	kinds := []string{soakFaultPodFailed}
	if !full {
		for _, k := range itest.NodeFaults {
			kinds = append(kinds, string(k))
		}
	}
	kind := kinds[f.s.intn(len(kinds))]
	node := victim.Spec.NodeName
	var err error
	if kind == soakFaultPodFailed {
		err = itest.FailPod(ctx, f.s.admin, victim.Namespace, victim.Name)
	} else {
		err = itest.InjectNodeFault(ctx, f.s.admin, node, itest.NodeFault(kind))
	}
	if err != nil {
		return // the pod or node changed meanwhile
	}
	hit := pods
	if kind == soakFaultPodFailed {
		hit = []*corev1.Pod{victim}
	}
	f.s.t.Logf("node fault %s: %s/%s on %s", kind, victim.Namespace, victim.Name, node)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.injected[kind]++
	if kind != soakFaultPodFailed {
		f.broken[node] = brokenNode{fault: itest.NodeFault(kind), repairAt: time.Now().Add(time.Duration(20000+f.s.intn(10000)) * time.Millisecond)}
	}
	if kind == soakFaultPodFailed {
		node = ""
	}
	for _, p := range hit {
		if p.Spec.NodeName == victim.Spec.NodeName {
			f.noteHit(p, node, pods)
		}
	}
}

// noteHit records the gang of p as hit (once while it recovers), with its
// pods before the fault.
func (f *nodeFaults) noteHit(p *corev1.Pod, node string, before []*corev1.Pod) {
	g := f.s.gangOf(p)
	if g == nil || slices.ContainsFunc(f.hits, func(h *faultHit) bool { return h.g == g && h.ended.IsZero() }) {
		return
	}
	uids := map[string]types.UID{}
	for _, q := range before {
		if f.s.gangOf(q) == g {
			uids[q.Name] = q.UID
		}
	}
	f.hits = append(f.hits, &faultHit{g: g, node: node, at: time.Now(), uids: uids})
}

// repair undoes the faults whose time is up (all of them when all is set).
func (f *nodeFaults) repair(ctx context.Context, all bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for node, b := range f.broken {
		if !all && time.Now().Before(b.repairAt) {
			continue
		}
		if err := itest.RepairNode(ctx, f.s.admin, node, itest.DomainOf(node), soakGPUsPerNode, b.fault); err == nil {
			delete(f.broken, node)
			for _, h := range f.hits {
				if h.node == node && h.fixed.IsZero() {
					h.fixed = time.Now()
				}
			}
		}
	}
}

// open counts the gangs hit that have not recovered yet.
func (f *nodeFaults) open() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, h := range f.hits {
		if h.ended.IsZero() {
			n++
		}
	}
	return n
}

// holding reports whether g was hit and has not recovered yet (for at
// most soakHitHold): the soak keeps it until then.
func (f *nodeFaults) holding(g *soakGang) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.ContainsFunc(f.hits, func(h *faultHit) bool {
		return h.g == g && h.ended.IsZero() && time.Since(h.at) < soakHitHold
	})
}

// observe notes the hit gangs that recovered: all members bound again and
// at least one a new pod (in place: some old pods still run; restarted:
// none), failed (gpufabric.dev/Failed), or deleted.
// At the end (final: the calm, every node repaired), a gang that runs
// its old pods survived, one evicted whole whose restart waits for room is
// restarting.
func (f *nodeFaults) observe(ctx context.Context, final bool) {
	f.mu.Lock()
	open := slices.DeleteFunc(slices.Clone(f.hits), func(h *faultHit) bool { return !h.ended.IsZero() })
	f.mu.Unlock()
	for _, h := range open {
		outcome, restarting := f.outcome(ctx, h, final)
		f.mu.Lock()
		if h.decided.IsZero() && (restarting || outcome != "") {
			h.decided = time.Now()
		}
		if outcome != "" {
			h.ended, h.outcome = time.Now(), outcome
		}
		f.mu.Unlock()
	}
}

// outcome says how h ended ("": not yet), and whether its gang is
// restarting whole (the policy acted; the placement may wait for room).
func (f *nodeFaults) outcome(ctx context.Context, h *faultHit, final bool) (string, bool) {
	if h.g.deleted {
		return "deleted", false
	}
	pg, err := f.s.admin.SchedulingV1beta1().PodGroups(h.g.ns).Get(ctx, h.g.name, metav1.GetOptions{})
	if err != nil {
		return "", false
	}
	return f.outcomeOf(ctx, h, pg, final)
}

func (f *nodeFaults) outcomeOf(ctx context.Context, h *faultHit, pg *schedulingv1beta1.PodGroup, final bool) (string, bool) {
	if c := meta.FindStatusCondition(pg.Status.Conditions, vocab.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
		return "failed", false
	}
	restarting := false
	if c := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.DisruptionTarget); c != nil && c.Status == metav1.ConditionTrue {
		restarting = c.Reason == vocab.ReasonMemberDisrupted || c.Reason == vocab.ReasonReplacingMembers
	}
	same, bound := 0, 0
	for _, p := range f.s.boundPods(ctx) {
		if f.s.gangOf(p) != h.g {
			continue
		}
		bound++
		if h.uids[p.Name] == p.UID {
			same++
		}
	}
	switch {
	case bound == 0 && restarting && final:
		// Evicted whole; its restart waits for room (the calm deletes no
		// gang, so the room may not come).
		return "restarting", true
	case bound < h.g.pods:
		return "", restarting
	case same == bound && h.node != "" && !f.isBroken(h.node) && (final || time.Since(h.at) > soakSurvived):
		// Its node came back and its members never were replaced: a
		// violation if the node was broken for soakLostBy or more.
		return "survived", false
	case same == bound:
		return "", restarting
	case same > 0:
		return "in_place", false
	}
	return "restarted", false
}

// soakSurvived: a gang whose node was repaired and that still runs its
// old pods this long after the fault survived it.
const soakSurvived = 30 * time.Second

func (f *nodeFaults) isBroken(node string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.broken[node]
	return ok
}

// report is the node faults' line, and a violation for each gang hit that
// neither recovered nor failed (nor was deleted).
func (f *nodeFaults) report(ctx context.Context) {
	f.observe(ctx, true)
	f.mu.Lock()
	defer f.mu.Unlock()
	outcomes := map[string]int{}
	var took []time.Duration
	for _, h := range f.hits {
		if h.ended.IsZero() {
			f.s.violation("gang %s/%s, hit by a fault %s ago, neither replaced, restarted nor failed", h.g.ns, h.g.name, time.Since(h.at).Round(time.Second))
			continue
		}
		outcomes[h.outcome]++
		switch h.outcome {
		case "survived":
			if h.fixed.IsZero() || h.fixed.Sub(h.at) >= soakLostBy {
				f.s.violation("gang %s/%s runs its old pods after its node %s was broken for %s: its members were not counted lost",
					h.g.ns, h.g.name, h.node, h.fixed.Sub(h.at).Round(time.Second))
			}
		case "in_place", "restarted", "restarting", "failed":
			// Bound: the policy's decision (a restart's placement waits
			// for room).
			took = append(took, h.decided.Sub(h.at))
			if d := h.decided.Sub(h.at); d > soakRecoverBound {
				f.s.violation("gang %s/%s hit by a fault took %s until it was %s (bound %s)", h.g.ns, h.g.name, d.Round(time.Second), h.outcome, soakRecoverBound)
			}
		}
	}
	f.s.emit(fmt.Sprintf("soak: node faults injected=%v gangs hit=%d outcomes=%v; fault to replaced, restarting or failed: %s",
		f.injected, len(f.hits), outcomes, quantiles(took)))
}

// boundPods are the soak gangs' pods bound to a node and not terminating.
func (s *soak) boundPods(ctx context.Context) []*corev1.Pod {
	var out []*corev1.Pod
	for _, gpus := range []int{2, 4, 8} {
		pods, err := s.admin.CoreV1().Pods(fmt.Sprintf("soak-%d", gpus)).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed {
				out = append(out, p)
			}
		}
	}
	return out
}

// gangOf is the soak gang p belongs to, or nil.
func (s *soak) gangOf(p *corev1.Pod) *soakGang {
	if p.Spec.SchedulingGroup == nil {
		return nil
	}
	name := ptr.Deref(p.Spec.SchedulingGroup.PodGroupName, "")
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.gangs {
		if g.ns == p.Namespace && g.name == name && !g.deleted {
			return g
		}
	}
	return nil
}

// rankLabel is a soak member's rank: its pods, the first and the
// replacements, carry it.
const rankLabel = "soak.gpufabric.dev/rank"

// replaceLost is the workload controller of the soak's gangs, as a Job
// is: a rank with no live pod (none, or only terminating or failed ones,
// which stay as a Job leaves them) gets a new pod.
func (s *soak) replaceLost(ctx context.Context) {
	s.mu.Lock()
	gangs := slices.Clone(s.gangs)
	s.mu.Unlock()
	live := map[string]bool{} // ns/group/rank
	listed := map[string]bool{}
	for _, g := range gangs {
		if g.deleted || ctx.Err() != nil {
			continue
		}
		if !listed[g.ns] {
			pods, err := s.admin.CoreV1().Pods(g.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return
			}
			listed[g.ns] = true
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Spec.SchedulingGroup != nil {
					live[p.Namespace+"/"+ptr.Deref(p.Spec.SchedulingGroup.PodGroupName, "")+"/"+p.Labels[rankLabel]] = true
				}
			}
		}
		for j := range g.pods {
			if live[fmt.Sprintf("%s/%s/%d", g.ns, g.name, j)] {
				continue
			}
			p := soakPod(g, j)
			p.Name = fmt.Sprintf("%s-%d-r%d", g.name, j, s.replacements.Add(1))
			if _, err := s.admin.CoreV1().Pods(g.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				return
			}
		}
	}
}

// soakPod is member j of g. It tolerates no taint: the fault taints evict
// it (and the unreachable ones only after the default 300 s).
func soakPod(g *soakGang, j int) *corev1.Pod {
	p := itest.TemplatePod(g.ns, fmt.Sprintf("%s-%d", g.name, j), g.name)
	p.Labels = map[string]string{rankLabel: fmt.Sprint(j)}
	p.Spec.Tolerations = nil
	return p
}

// soakGroup is g's PodGroup: with node faults, one in three gangs is in
// disruption mode All and one in eight fails (gpufabric.dev/on-member-loss
// Fail) rather than restart (the default) when a replacement finds no room.
func (s *soak) soakGroup(g *soakGang) *schedulingv1beta1.PodGroup {
	pg := itest.TemplateGroup(g.ns, g.name, int32(g.pods))
	if s.nf == nil {
		return pg
	}
	if s.intn(3) == 0 {
		pg.Spec.DisruptionMode = &schedulingv1beta1.DisruptionMode{All: &schedulingv1beta1.AllDisruptionMode{}}
	}
	if s.intn(8) == 0 {
		pg.Annotations = map[string]string{vocab.AnnotationOnMemberLoss: vocab.PolicyFail}
	}
	return pg
}
