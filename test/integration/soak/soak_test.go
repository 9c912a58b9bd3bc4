package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	cp := framework.StartT(t, framework.Options{ControllerManager: true, Kwok: true, NodeMonitorGracePeriod: soakNodeMonitorGrace})
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
	var adv *adversary
	if os.Getenv(soakAdversaryEnv) != "0" {
		adv = newAdversary(s, envInt(t, soakAdversaryGangsEnv, 20))
	}
	if os.Getenv(soakNodeFaultsEnv) != "0" {
		s.nf = newNodeFaults(s)
	}
	s.startProxy()
	s.restart()
	ctx, cancel := context.WithTimeout(t.Context(), duration)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { s.generate(ctx) })
	wg.Go(func() { s.chaos(ctx) })
	wg.Go(func() { s.watch(ctx) })
	if s.nf != nil {
		wg.Go(func() { s.nf.run(ctx) })
	}
	if adv != nil {
		// The first half is the clean run the second is compared with.
		wg.Go(func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(duration / 2):
			}
			s.adversaryOn.Store(true)
			adv.run(ctx)
		})
	}
	wg.Wait()

	// Calm: no more faults or kills, broken nodes repaired; every gang
	// ends placed, refused or failed with a reason.
	s.proxy.ClearRules()
	s.restartIfDead()
	if s.nf != nil {
		s.nf.repair(t.Context(), true)
	}
	itest.Poll(t, "every gang placed, refused or failed with a reason", 3*time.Minute, func(ctx context.Context) error {
		// A process that lost its Lease to a fault just before the calm
		// exits later; its Deployment would start it again.
		s.restartIfDead()
		s.check(ctx)
		s.cycle(ctx, false) // note the gangs placed in the calm
		s.replaceLost(ctx)
		if s.nf != nil {
			s.nf.repair(ctx, true)
			s.nf.observe(ctx, true)
			if n := s.nf.open(); n > 0 {
				return fmt.Errorf("%d gangs hit by node faults not recovered yet", n)
			}
		}
		err := s.settled(ctx)
		// Keep the last real answer over the deadline's: in the last
		// seconds the client's rate limiter refuses to wait and the check
		// answers with that instead of the gang that is not settled.
		if dl, ok := ctx.Deadline(); ctx.Err() == nil && (!ok || time.Until(dl) > 5*time.Second) {
			s.lastSettle.Store(fmt.Sprintf("%v; %s", err, s.processState()))
		}
		return err
	})
	s.report(adv)
	if s.nf != nil {
		s.nf.report(t.Context())
	}
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
	nf    *nodeFaults // nil: no node faults

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
	// replacements names the pods replaceLost creates.
	replacements atomic.Int64

	violations  atomic.Int64
	lastSettle  atomic.Value // string: the last answer of settled
	adversaryOn atomic.Bool  // the adversarial tenant is sending
}

type soakGang struct {
	ns, name   string
	pods       int
	impossible bool
	created    time.Time     // its PodGroup was created
	adversary  bool          // created while the adversarial tenant was sending
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
		"--domain-channels=8", "--metrics-address=", "-v=2",
		"--node-failure-grace="+soakNodeFailureGrace.String(), "--replacement-timeout="+soakReplacementTimeout.String()))
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
		if s.cycle(ctx, true) < soakLiveGangs && ctx.Err() == nil {
			s.createGang(i)
		}
		s.replaceLost(ctx)
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
	if _, err := s.admin.SchedulingV1beta1().PodGroups(g.ns).Create(ctx, s.soakGroup(g), metav1.CreateOptions{}); err != nil {
		s.t.Errorf("create podgroup %s/%s: %v", g.ns, g.name, err)
		return
	}
	g.created, g.adversary = time.Now(), s.adversaryOn.Load()
	s.mu.Lock()
	s.gangs = append(s.gangs, g)
	s.mu.Unlock()
	s.created.Add(1)
	for j := range g.pods {
		if _, err := s.admin.CoreV1().Pods(g.ns).Create(ctx, soakPod(g, j), metav1.CreateOptions{}); err != nil {
			s.t.Errorf("create pod %d of %s/%s: %v", j, g.ns, g.name, err)
			return
		}
	}
}

// cycle notes the gangs that got placed (or, impossible ones, refused),
// deletes those whose time is up when expire is set, and returns how many
// are left.
func (s *soak) cycle(ctx context.Context, expire bool) int {
	bound := map[string]int{}
	for _, gpus := range []int{2, 4, 8} {
		pods, err := s.admin.CoreV1().Pods(fmt.Sprintf("soak-%d", gpus)).List(ctx, metav1.ListOptions{})
		if err != nil {
			return soakLiveGangs
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && p.Spec.SchedulingGroup != nil && p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed {
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
		if expire && !g.done.IsZero() && time.Since(g.done) > g.lifetime && (s.nf == nil || !s.nf.holding(g)) {
			s.deleteGang(ctx, g)
			continue
		}
		live++
	}
	return live
}

func (s *soak) deleteGang(ctx context.Context, g *soakGang) {
	// Its pods: the first ones and any replacements (replaceLost).
	if pods, err := s.admin.CoreV1().Pods(g.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			if p.Spec.SchedulingGroup != nil && ptr.Deref(p.Spec.SchedulingGroup.PodGroupName, "") == g.name {
				_ = s.admin.CoreV1().Pods(g.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			}
		}
	}
	_ = s.admin.SchedulingV1beta1().PodGroups(g.ns).Delete(ctx, g.name, metav1.DeleteOptions{})
	g.deleted = true
	s.deleted.Add(1)
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
