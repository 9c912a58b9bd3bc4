package faults

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// outcome is what a case's gang must come to after its fault.
type outcome int

const (
	// inPlace: the lost member's replacement runs in the member's NVLink
	// domain, the other members keep running (the same pods).
	inPlace outcome = iota
	// restarted: every member is a new pod, the gang runs whole in one
	// domain without the failed node (the other domain when the case has
	// two, its own when it has one).
	restarted
	// failed: the PodGroup's gpufabric.dev/Failed is True (NoReplacement),
	// its members are evicted, the replacement is not bound.
	failed
	// waitThenInPlace: MembersLost says NoReplacement and the replacement
	// waits; once the node is repaired it runs in the member's domain.
	waitThenInPlace
)

// faultCase is a gang, the fault under it and what must follow.
type faultCase struct {
	name    string // namespace, Job, PodGroup, node label, domain prefix
	pods    int
	domains []int // nodes per NVLink domain
	all     bool  // disruption mode All
	// jobPodGroup: the Job controller makes the PodGroup (spec.scheduling);
	// else the test does, with the annotations below.
	jobPodGroup bool
	policy      string        // gpufabric.dev/on-member-loss; "": the cluster default (Restart)
	timeout     time.Duration // gpufabric.dev/replacement-timeout; 0: the default
	segment     int           // gpufabric.dev/segment-size in nvlinkDomain
	victim      int           // the rank whose node (or pod) fails
	fault       itest.NodeFault
	trigger     string // the metric's trigger label
	want        outcome
}

// outcomeLabel is the metric's outcome label of the case (a gang
// restarted whole counts as restarted, into its own domain too).
func (c *faultCase) outcomeLabel() string {
	return map[outcome]string{inPlace: "in_place", restarted: "restarted", failed: "failed", waitThenInPlace: "in_place"}[c.want]
}

// faultCases run at once, each on its own nodes. Gangs of 2 (segmented:
// 4) members of 4 GPUs, one per node.
var faultCases = []*faultCase{
	// Room in the domain: replaced in place.
	{name: "podfail", pods: 2, domains: []int{2}, victim: 1, trigger: "pod_failed", want: inPlace},
	{name: "taint", pods: 2, domains: []int{3}, victim: 1, fault: itest.FaultTaint, trigger: "node_tainted", want: inPlace},
	{name: "notready", pods: 2, domains: []int{3}, victim: 1, fault: itest.FaultNotReady, trigger: "node_not_ready", want: inPlace},
	// Each segment in its own domain, each domain with a spare node: the
	// replacement of rank 2 goes to its segment's domain, not the other.
	{name: "seg", pods: 4, domains: []int{3, 3}, segment: 2, victim: 2, fault: itest.FaultTaint, trigger: "node_tainted", want: inPlace},
	// Disruption mode All: the gang restarts whole, never runs partly; in
	// its own domain when it has room (the Job controller's PodGroup),
	// else in the other.
	{name: "allnotready", pods: 2, domains: []int{3}, all: true, jobPodGroup: true, victim: 0, fault: itest.FaultNotReady, trigger: "node_not_ready", want: restarted},
	{name: "alltaint", pods: 2, domains: []int{2, 2}, all: true, timeout: 5 * time.Second, victim: 1, fault: itest.FaultTaint, trigger: "node_tainted", want: restarted},
	// No room in the domain: the policy decides after 5 s.
	{name: "restart", pods: 2, domains: []int{2, 2}, policy: vocab.PolicyRestart, timeout: 5 * time.Second, victim: 1, fault: itest.FaultDelete, trigger: "node_deleted", want: restarted},
	{name: "fail", pods: 2, domains: []int{2}, policy: vocab.PolicyFail, timeout: 5 * time.Second, victim: 1, fault: itest.FaultTaint, trigger: "node_tainted", want: failed},
	{name: "wait", pods: 2, domains: []int{2}, policy: vocab.PolicyWait, timeout: 5 * time.Second, victim: 1, fault: itest.FaultTaint, trigger: "node_tainted", want: waitThenInPlace},
}

// allSettle is how long a gang in disruption mode All may run partly (its
// lost member gone or unbound, others running) before it is a violation:
// the eviction of the others and the bindings of a restart take less.
const allSettle = 10 * time.Second

// TestNodeFaults: each case's Indexed Job runs its gang; then, all at
// once, each case's fault hits a member; each gang must come to its
// outcome, no gang in mode All runs partly for longer than allSettle, and
// no device is ever allocated twice. The scheduler's
// gpufabric_scheduler_member_replacement_seconds counts each case's
// trigger and outcome. Logs "faults:" lines with the time from each fault
// to the replacement bound.
func TestNodeFaults(t *testing.T) {
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true, NodeMonitorGracePeriod: nodeMonitorGrace})
	admin := cp.AdminClient(t)
	itest.FabricCluster(t, admin, nil, 0, 0) // the device classes
	var nodes []string
	for _, c := range faultCases {
		nodes = append(nodes, caseNodes(t, admin, c)...)
		itest.GangNamespace(t, admin, c.name, gpusPerNode)
	}
	waitNodesReady(t, admin, nodes)
	metricsAddr := startScheduler(t, cp)
	token := itest.EndpointToken(t, admin, "faults-prometheus", "/metrics")
	for _, c := range faultCases {
		createJob(t, admin, c)
	}

	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { watchInvariants(ctx, t, admin) })
	// All at once, whatever -parallel says (the cases wait on the control
	// plane, not on CPUs).
	var cases sync.WaitGroup
	for _, c := range faultCases {
		cases.Go(func() { t.Run(c.name, func(t *testing.T) { runCase(t, admin, c) }) })
	}
	cases.Wait()
	stop()
	wg.Wait()
	checkReplacementMetric(t, metricsAddr, token)
}

// runCase waits for the case's gang to run, injects its fault and checks
// what follows.
func runCase(t *testing.T, admin kubernetes.Interface, c *faultCase) {
	var before *gang
	itest.Poll(t, "gang running", 90*time.Second, func(ctx context.Context) error {
		g, err := readGang(ctx, admin, c.name)
		if err == nil {
			err = g.running(c.pods)
		}
		before = g
		return err
	})
	victim := before.live[c.victim]
	node, domain := victim.Spec.NodeName, before.domainOf(c.victim)
	start := time.Now()
	if c.fault == "" {
		itest.Must(t, "fail pod", itest.FailPod(t.Context(), admin, c.name, victim.Name))
	} else {
		itest.Must(t, "node fault", itest.InjectNodeFault(t.Context(), admin, node, c.fault))
	}
	t.Logf("%s: rank %d (%s) on %s in %s, gang %s", c.fault, c.victim, victim.Name, node, domain, before)
	switch c.want {
	case inPlace:
		after, bound := waitInPlace(t, admin, c, before, node, domain, c.fault != "")
		report(t, c, "fault", start, bound, after)
	case restarted:
		after, bound := waitRestarted(t, admin, c, before, node)
		report(t, c, "fault", start, bound, after)
	case failed:
		itest.Poll(t, "PodGroup Failed", 60*time.Second, func(ctx context.Context) error {
			return conditionIs(ctx, admin, c, vocab.ConditionFailed, metav1.ConditionTrue, vocab.ReasonNoReplacement)
		})
		t.Logf("faults: %s %s → failed after %s", c.name, c.trigger, since(start))
		itest.Poll(t, "the failed gang's members evicted", 30*time.Second, func(ctx context.Context) error {
			g, err := readGang(ctx, admin, c.name)
			if err == nil && g.bound() > 0 {
				err = fmt.Errorf("%d members of the failed gang still run: %s", g.bound(), g)
			}
			return err
		})
		assertUnbound(t, admin, c, "a failed gang's replacement")
	case waitThenInPlace:
		itest.Poll(t, "MembersLost NoReplacement", 60*time.Second, func(ctx context.Context) error {
			return conditionIs(ctx, admin, c, vocab.ConditionMembersLost, metav1.ConditionTrue, vocab.ReasonNoReplacement)
		})
		assertUnbound(t, admin, c, "the waiting replacement")
		itest.Must(t, "repair node", itest.RepairNode(t.Context(), admin, node, "dom-"+domain, gpusPerNode, c.fault))
		repaired := time.Now()
		after, bound := waitInPlace(t, admin, c, before, "", domain, true)
		report(t, c, "repair", repaired, bound, after)
	}
}

// waitRunning polls until the gang runs whole and check accepts it; it
// returns the gang and when it was seen so.
func waitRunning(t *testing.T, admin kubernetes.Interface, c *faultCase, what string, timeout time.Duration, check func(*gang) error) (*gang, time.Time) {
	t.Helper()
	var after *gang
	var bound time.Time
	itest.Poll(t, what, timeout, func(ctx context.Context) error {
		g, err := readGang(ctx, admin, c.name)
		if err != nil {
			return err
		}
		if err := g.running(c.pods); err != nil {
			return err
		}
		if err := check(g); err != nil {
			return err
		}
		after, bound = g, time.Now()
		return nil
	})
	return after, bound
}

// waitInPlace waits until the gang runs with the victim's rank replaced
// in domain (not on badNode unless it is ""), the other ranks the same
// pods; then MembersLost says ReplacedInPlace.
func waitInPlace(t *testing.T, admin kubernetes.Interface, c *faultCase, before *gang, badNode, domain string, newNode bool) (*gang, time.Time) {
	t.Helper()
	old := before.uids()
	after, bound := waitRunning(t, admin, c, "replaced in place", replacementTimeout+30*time.Second, func(g *gang) error {
		for r, uid := range g.uids() {
			if (r == c.victim) == (uid == old[r]) {
				return fmt.Errorf("rank %d: same pod %v, want a new pod only for rank %d: %s", r, uid == old[r], c.victim, g)
			}
		}
		return nil
	})
	p := after.live[c.victim]
	if d := after.domainOf(c.victim); d != domain {
		t.Errorf("the replacement %s runs on %s in %s, want its member's domain %s", p.Name, p.Spec.NodeName, d, domain)
	}
	if newNode && badNode != "" && p.Spec.NodeName == badNode {
		t.Errorf("the replacement %s runs on the failed node %s", p.Name, badNode)
	}
	itest.Poll(t, "MembersLost ReplacedInPlace", 20*time.Second, func(ctx context.Context) error {
		return conditionIs(ctx, admin, c, vocab.ConditionMembersLost, metav1.ConditionFalse, vocab.ReasonReplacedInPlace)
	})
	return after, bound
}

// waitRestarted waits until the gang runs whole as new pods in one domain
// off badNode: its own domain if it has only one, else the other.
func waitRestarted(t *testing.T, admin kubernetes.Interface, c *faultCase, before *gang, badNode string) (*gang, time.Time) {
	t.Helper()
	old := before.uids()
	after, bound := waitRunning(t, admin, c, "restarted whole", replacementTimeout+60*time.Second, func(g *gang) error {
		for r, uid := range g.uids() {
			if uid == old[r] {
				return fmt.Errorf("rank %d is still the same pod: %s", r, g)
			}
		}
		return nil
	})
	doms, prev := after.domains(), before.domains()
	want := prev
	if len(c.domains) > 1 {
		want = []string{"dom-" + c.name + "a", "dom-" + c.name + "b"}
		want = slices.DeleteFunc(want, func(d string) bool { return d == prev[0] })
	}
	if !slices.Equal(doms, want) {
		t.Errorf("restarted gang in %v, want %v: %s", doms, want, after)
	}
	for _, p := range after.live {
		if p.Spec.NodeName == badNode {
			t.Errorf("restarted member %s on the failed node %s", p.Name, badNode)
		}
	}
	itest.Poll(t, "DisruptionTarget GangRestarted", 20*time.Second, func(ctx context.Context) error {
		return conditionIs(ctx, admin, c, schedulingv1beta1.DisruptionTarget, metav1.ConditionFalse, vocab.ReasonGangRestarted)
	})
	itest.Poll(t, "GangRestart event, and the trigger named", 20*time.Second, func(ctx context.Context) error {
		pg, err := podGroup(ctx, admin, c)
		if err != nil {
			return err
		}
		if err := findEvent(ctx, admin, c.name, pg.Name, vocab.EventGangRestart); err != nil {
			return err
		}
		// The restart's event names the trigger, or (a taint manager's
		// deletion) the MembersLost event before it does.
		if findEvent(ctx, admin, c.name, pg.Name, vocab.EventGangRestart, c.trigger) == nil {
			return nil
		}
		return findEvent(ctx, admin, c.name, pg.Name, vocab.EventMembersLost, c.trigger)
	})
	return after, bound
}

// assertUnbound checks for 3 s that the victim's rank has no bound pod.
func assertUnbound(t *testing.T, admin kubernetes.Interface, c *faultCase, what string) {
	t.Helper()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		g, err := readGang(t.Context(), admin, c.name)
		itest.Must(t, "read gang", err)
		if p := g.live[c.victim]; p != nil && p.Spec.NodeName != "" {
			t.Fatalf("%s %s is bound to %s", what, p.Name, p.Spec.NodeName)
		}
	}
}

// report logs the time from the fault (or repair) to the replacement pod's
// creation and to all bound.
func report(t *testing.T, c *faultCase, from string, start, bound time.Time, after *gang) {
	t.Helper()
	created := after.live[c.victim].CreationTimestamp.Time
	for _, p := range after.live {
		if p.CreationTimestamp.After(created) {
			created = p.CreationTimestamp.Time
		}
	}
	t.Logf("faults: %s %s → %s: %s→all bound %s (→ replacement created by the Job controller %s)",
		c.name, c.trigger, c.outcomeLabel(), from, bound.Sub(start).Round(100*time.Millisecond), created.Sub(start).Round(time.Second))
}
