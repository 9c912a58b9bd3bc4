package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// Environment of TestChaosSoak (`make soak` sets them; `make test` runs a
// short soak with the defaults).
const (
	soakDurationEnv = "GPUFABRIC_SOAK_DURATION" // default 40s
	soakSeedEnv     = "GPUFABRIC_SOAK_SEED"     // default 1
)

// Shape of the soak's cluster and workload.
const (
	soakDomains, soakNodesPerDomain, soakGPUsPerNode = 3, 6, 8 // 48 GPUs per domain
	soakLiveGangs                                    = 6
	// A state that breaks an invariant only while a commit is in flight
	// (some members bound, claims allocated before the bindings) is a
	// violation once it has lasted this long.
	soakSettle = 30 * time.Second
)

// TestChaosSoak places concurrent gangs on the real apiserver while the
// scheduler process (the chart's identity, RBAC and policies, leader
// election on) is SIGKILLed at random moments and a loopback proxy between
// it and the apiserver delays requests, drops connections (before and after
// forwarding) and answers 409, 429, 500 and 503. Gangs come and go (placed,
// run on kwok nodes, deleted), one in ten cannot fit anywhere. Throughout,
// the invariants hold: no device allocated twice; no gang partly bound and
// no claim allocated for an unplaced gang for longer than a commit and a
// restart take. In the end every gang is placed or refused with a reason.
func TestChaosSoak(t *testing.T) {
	duration := envDuration(t, soakDurationEnv, 40*time.Second)
	seed := envInt(t, soakSeedEnv, 1)
	var s *soak
	// Registered first, so it runs last: after the components' logs, where
	// a CI log's tail shows it.
	t.Cleanup(func() {
		if t.Failed() && s != nil {
			t.Logf("soak failed; its state at the end: %s; last check: %v", s.summary(), s.lastSettle.Load())
		}
	})
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true})
	admin := cp.AdminClient(t)
	domains := make([]string, soakDomains)
	for i := range domains {
		domains[i] = string(rune('a' + i))
	}
	itest.KwokFabric(t, admin, domains, soakNodesPerDomain, soakGPUsPerNode)
	itest.ApplyChartScheduler(t, cp, admin)
	for _, g := range []int{2, 4, 8} {
		itest.GangNamespace(t, admin, fmt.Sprintf("soak-%d", g), int64(g))
	}
	s = &soak{t: t, cp: cp, admin: admin, rng: rand.New(rand.NewPCG(uint64(seed), 7)), seen: map[string]time.Time{}}
	s.startProxy()
	s.restart()
	ctx, cancel := context.WithTimeout(t.Context(), duration)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { s.generate(ctx) })
	wg.Go(func() { s.chaos(ctx) })
	wg.Go(func() { s.watch(ctx) })
	wg.Wait()

	// Calm: no more faults or kills; every gang ends placed or refused.
	s.proxy.ClearRules()
	s.restartIfDead()
	itest.Poll(t, "every gang placed or refused with a reason", 3*time.Minute, func(ctx context.Context) error {
		// A process that lost its Lease to a fault just before the calm
		// exits later; its Deployment would start it again.
		s.restartIfDead()
		s.check(ctx)
		err := s.settled(ctx)
		// Keep the last real answer over the deadline's: in the last
		// seconds the client's rate limiter refuses to wait and the check
		// answers with that instead of the gang that is not settled.
		if dl, ok := ctx.Deadline(); ctx.Err() == nil && (!ok || time.Until(dl) > 5*time.Second) {
			s.lastSettle.Store(fmt.Sprintf("%v; %s", err, s.processState()))
		}
		return err
	})
	s.report()
	if v := s.violations.Load(); v > 0 {
		t.Errorf("%d invariant violations (see above)", v)
	}
}

// soak is the state of one run. Its counters are safe for concurrent use.
type soak struct {
	t     *testing.T
	cp    *framework.ControlPlane
	admin kubernetes.Interface
	proxy *framework.Proxy
	token string

	procMu sync.Mutex // the scheduler process: gen, starts and kills
	gen    int        // scheduler processes started

	mu      sync.Mutex
	rng     *rand.Rand
	gangs   []*soakGang
	seen    map[string]time.Time // a transient state, by key: first seen
	faults  map[string]int
	created atomic.Int64
	placed  atomic.Int64
	deleted atomic.Int64
	kills   atomic.Int64

	violations atomic.Int64
	lastSettle atomic.Value // string: the last answer of settled
}

type soakGang struct {
	ns, name   string
	pods       int
	impossible bool
	done       time.Time     // placed (or, if impossible, first seen refused)
	lifetime   time.Duration // how long it runs once placed
	deleted    bool
}

func (s *soak) intn(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.IntN(n)
}

// startProxy puts the fault proxy in front of the scheduler's identity.
func (s *soak) startProxy() {
	p, err := s.cp.NewProxy(s.t.Context())
	itest.Must(s.t, "start proxy", err)
	s.proxy = p
	s.token = itest.ServiceAccountToken(s.t, s.admin, itest.ChartSchedulerName, itest.SchedulerPod(s.t, s.admin, "soak-scheduler"))
	s.faults = map[string]int{}
	faults := []struct {
		name  string
		fault framework.Fault
	}{
		{"409", framework.Fault{Status: http.StatusConflict}},
		{"429", framework.Fault{Status: http.StatusTooManyRequests}},
		{"500", framework.Fault{Status: http.StatusInternalServerError}},
		{"503", framework.Fault{Status: http.StatusServiceUnavailable}},
		{"drop-before", framework.Fault{DropBefore: true}},
		{"drop-after", framework.Fault{DropAfter: true}},
		{"delay", framework.Fault{Delay: 300 * time.Millisecond}},
	}
	for _, f := range faults {
		s.proxy.AddRule(&framework.Rule{
			Match: func(r *http.Request) bool {
				// Writes of the scheduler's work (not its Lease: losing the
				// Lease to a fault only restarts the term), 1 in 40 each.
				return framework.IsWrite(r) && !itest.IsLease(r) && s.intn(40) == 0
			},
			Fault: f.fault,
			OnMatch: func(*http.Request) {
				s.mu.Lock()
				s.faults[f.name]++
				s.mu.Unlock()
			},
		})
	}
}

// restart starts a new scheduler process through the proxy.
func (s *soak) restart() {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	s.startLocked()
}

func (s *soak) startLocked() {
	s.gen++
	kc, err := s.proxy.Kubeconfig(s.t.TempDir(), "soak", s.token)
	itest.Must(s.t, "kubeconfig", err)
	itest.Must(s.t, "start scheduler", s.cp.StartProcess(s.procName(), framework.SchedulerBinary(s.t), "--kubeconfig="+kc,
		"--leader-elect-namespace="+itest.ChartNamespace, "--leader-elect-identity=soak-scheduler", "--commit-record-namespace="+itest.ChartNamespace,
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms",
		"--domain-channels=8", "--metrics-address=", "-v=2"))
}

func (s *soak) procName() string { return "scheduler-" + strconv.Itoa(s.gen) }

// restartIfDead starts a new process when the current one exited (a lost
// Lease after a fault ends the process, as in production).
func (s *soak) restartIfDead() {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	if done, _ := s.cp.Exited(s.procName()); done {
		s.startLocked()
	}
}

func (s *soak) kill() {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	if err := s.cp.Signal(s.procName(), syscall.SIGKILL); err == nil {
		s.kills.Add(1)
	}
}

// chaos SIGKILLs the scheduler every 5–20 s and starts it again after 0–2 s.
func (s *soak) chaos(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(5000+s.intn(15000)) * time.Millisecond):
		}
		s.kill()
		time.Sleep(time.Duration(s.intn(2000)) * time.Millisecond)
		// Only once it is gone: two processes with one identity would both
		// hold the Lease (replicas must have distinct identities).
		s.restartIfDead()
	}
}

// generate keeps soakLiveGangs gangs in flight: creates gangs (1 in 10 too
// big for any domain) and deletes placed ones after they ran a while.
func (s *soak) generate(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		s.restartIfDead()
		if s.cycle(ctx) < soakLiveGangs && ctx.Err() == nil {
			s.createGang(i)
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// itest.CreateGang creates one gang whole: once its PodGroup exists, its pods
// are created even if the run's time is up meanwhile (a gang left with
// fewer pods than minCount would wait for members forever).
func (s *soak) createGang(i int) {
	ctx := s.t.Context()
	gpus := []int{2, 4, 8}[s.intn(3)]
	g := &soakGang{ns: fmt.Sprintf("soak-%d", gpus), name: fmt.Sprintf("g%03d", i), pods: 1 + s.intn(48/gpus),
		lifetime: time.Duration(5+s.intn(15)) * time.Second}
	if s.intn(10) == 0 {
		g.impossible, g.pods = true, 48/gpus+1
	}
	if _, err := s.admin.SchedulingV1beta1().PodGroups(g.ns).Create(ctx, itest.TemplateGroup(g.ns, g.name, int32(g.pods)), metav1.CreateOptions{}); err != nil {
		s.t.Errorf("create podgroup %s/%s: %v", g.ns, g.name, err)
		return
	}
	s.mu.Lock()
	s.gangs = append(s.gangs, g)
	s.mu.Unlock()
	s.created.Add(1)
	for j := range g.pods {
		if _, err := s.admin.CoreV1().Pods(g.ns).Create(ctx, itest.TemplatePod(g.ns, fmt.Sprintf("%s-%d", g.name, j), g.name), metav1.CreateOptions{}); err != nil {
			s.t.Errorf("create pod %d of %s/%s: %v", j, g.ns, g.name, err)
			return
		}
	}
}

// cycle notes the gangs that got placed (or, impossible ones, refused),
// deletes those whose time is up, and returns how many are left.
func (s *soak) cycle(ctx context.Context) int {
	bound := map[string]int{}
	for _, gpus := range []int{2, 4, 8} {
		pods, err := s.admin.CoreV1().Pods(fmt.Sprintf("soak-%d", gpus)).List(ctx, metav1.ListOptions{})
		if err != nil {
			return soakLiveGangs
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && p.Spec.SchedulingGroup != nil {
				bound[p.Namespace+"/"+ptr.Deref(p.Spec.SchedulingGroup.PodGroupName, "")]++
			}
		}
	}
	s.mu.Lock()
	gangs := append([]*soakGang(nil), s.gangs...)
	s.mu.Unlock()
	live := 0
	for _, g := range gangs {
		if g.deleted {
			continue
		}
		if g.done.IsZero() && (bound[g.ns+"/"+g.name] == g.pods || g.impossible) {
			g.done = time.Now()
			if !g.impossible {
				s.placed.Add(1)
			}
		}
		if !g.done.IsZero() && time.Since(g.done) > g.lifetime {
			s.deleteGang(ctx, g)
			continue
		}
		live++
	}
	return live
}

func (s *soak) deleteGang(ctx context.Context, g *soakGang) {
	for j := range g.pods {
		_ = s.admin.CoreV1().Pods(g.ns).Delete(ctx, fmt.Sprintf("%s-%d", g.name, j), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
	_ = s.admin.SchedulingV1beta1().PodGroups(g.ns).Delete(ctx, g.name, metav1.DeleteOptions{})
	g.deleted = true
	s.deleted.Add(1)
}

// watch checks the invariants every second.
func (s *soak) watch(ctx context.Context) {
	for ctx.Err() == nil {
		s.check(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// check reads every soak namespace and reports violations: a device
// allocated twice at once; a gang partly bound, or with allocated claims
// and no pod bound, for longer than soakSettle.
func (s *soak) check(ctx context.Context) {
	if dup, err := itest.DevicesAllocatedTwice(ctx, s.admin); err == nil && len(dup) > 0 {
		s.violation("devices allocated twice: %v", dup)
	}
	now := time.Now()
	current := map[string]bool{}
	for _, g := range []int{2, 4, 8} {
		ns := fmt.Sprintf("soak-%d", g)
		st, err := itest.ReadGang(ctx, s.admin, ns)
		if err != nil {
			return
		}
		for _, bad := range transientStates(st) {
			key := ns + "/" + bad
			current[key] = true
			s.mu.Lock()
			first, ok := s.seen[key]
			if !ok {
				s.seen[key] = now
			}
			s.mu.Unlock()
			if ok && now.Sub(first) > soakSettle {
				s.violation("%s for %s", key, now.Sub(first).Round(time.Second))
				s.mu.Lock()
				s.seen[key] = now // report again only after another settle time
				s.mu.Unlock()
			}
		}
	}
	s.mu.Lock()
	for key := range s.seen {
		if !current[key] {
			delete(s.seen, key)
		}
	}
	s.mu.Unlock()
}

// transientStates names the gangs of a namespace that are partly bound, or
// hold allocated claims with no member bound.
func transientStates(st *itest.GangState) []string {
	type count struct{ pods, bound int }
	groups := map[string]*count{}
	for _, p := range st.Pods {
		if p.DeletionTimestamp != nil || p.Spec.SchedulingGroup == nil {
			continue
		}
		g := ptr.Deref(p.Spec.SchedulingGroup.PodGroupName, "")
		if groups[g] == nil {
			groups[g] = &count{}
		}
		groups[g].pods++
		if p.Spec.NodeName != "" {
			groups[g].bound++
		}
	}
	var out []string
	for g, c := range groups {
		if c.bound > 0 && c.bound < c.pods {
			out = append(out, fmt.Sprintf("%s partly bound (%d of %d)", g, c.bound, c.pods))
		}
	}
	for _, cl := range st.Claims {
		if cl.Status.Allocation == nil || cl.DeletionTimestamp != nil {
			continue
		}
		for _, r := range cl.Status.ReservedFor {
			g := r.Name
			if r.Resource == "pods" {
				g, _, _ = strings.Cut(r.Name, "-")
			}
			if c := groups[g]; c != nil && c.bound == 0 {
				out = append(out, fmt.Sprintf("%s holds claim %s with no pod bound", g, cl.Name))
			}
		}
	}
	return out
}

// settled: every gang still there is fully bound (its commit record gone),
// or refused with the Unschedulable condition and a message.
func (s *soak) settled(ctx context.Context) error {
	for _, g := range []int{2, 4, 8} {
		ns := fmt.Sprintf("soak-%d", g)
		st, err := itest.ReadGang(ctx, s.admin, ns)
		if err != nil {
			return err
		}
		if len(st.Records) > 0 {
			return fmt.Errorf("%s: commit records left %v", ns, st.Records)
		}
		for _, pg := range st.Groups {
			if pg.DeletionTimestamp != nil {
				continue
			}
			if err := placedOrRefused(st, &pg); err != nil {
				return fmt.Errorf("%s/%s: %w", ns, pg.Name, err)
			}
		}
	}
	return nil
}

func placedOrRefused(st *itest.GangState, pg *schedulingv1beta1.PodGroup) error {
	pods, bound := 0, 0
	for _, p := range st.Pods {
		if p.Spec.SchedulingGroup != nil && ptr.Deref(p.Spec.SchedulingGroup.PodGroupName, "") == pg.Name {
			pods++
			if p.Spec.NodeName != "" {
				bound++
			}
		}
	}
	c := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled)
	switch {
	case pods > 0 && bound == pods:
		return nil
	case bound == 0 && c != nil && c.Status == metav1.ConditionFalse && c.Reason == schedulingv1beta1.PodGroupReasonUnschedulable && c.Message != "":
		return nil
	}
	return fmt.Errorf("%d of %d bound, condition %+v", bound, pods, c)
}

func (s *soak) violation(format string, args ...any) {
	s.violations.Add(1)
	s.t.Errorf("VIOLATION: "+format, args...)
}

// summary is the run's counters.
func (s *soak) summary() string {
	return fmt.Sprintf("created=%d placed=%d deleted=%d kills=%d processes=%d violations=%d",
		s.created.Load(), s.placed.Load(), s.deleted.Load(), s.kills.Load(), s.gen, s.violations.Load())
}

// processState says whether the current scheduler process runs.
func (s *soak) processState() string {
	s.procMu.Lock()
	defer s.procMu.Unlock()
	exited, err := s.cp.Exited(s.procName())
	return fmt.Sprintf("%s exited=%v (%v)", s.procName(), exited, err)
}

// report prints the run's numbers in one line (docs/benchmarks.md).
func (s *soak) report() {
	s.mu.Lock()
	faults := fmt.Sprint(s.faults)
	total := 0
	for _, n := range s.faults {
		total += n
	}
	s.mu.Unlock()
	line := fmt.Sprintf("soak: gangs created=%d placed=%d deleted=%d kills=%d processes=%d faults=%d %s violations=%d",
		s.created.Load(), s.placed.Load(), s.deleted.Load(), s.kills.Load(), s.gen, total, faults, s.violations.Load())
	s.t.Log(line)
	fmt.Fprintln(os.Stderr, line)
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	itest.Must(t, "parse "+name, err)
	return d
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	itest.Must(t, "parse "+name, err)
	return n
}
