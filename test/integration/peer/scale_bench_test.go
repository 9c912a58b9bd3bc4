package peer

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// The cluster of BenchmarkGang512: one IB leaf of 64 kwok nodes × 8 GPUs,
// 8 racks (= NVLink domains) of 8 nodes. A 512-pod gang of 1 GPU each fills
// the leaf exactly; its PodGroup asks for the leaf as topology level.
const (
	benchPods      = 512
	benchNodes     = 64
	benchGPUs      = 8
	benchRackNodes = 8
	benchRackLabel = "topology.gpufabric.dev/rack"
	benchLeafLabel = "topology.gpufabric.dev/ib-leaf"
	// benchWorkers is the parallelism of the test's creates and raw binds:
	// the scheduler's commit parallelism.
	benchWorkers = scheduler.DefaultCommitParallelism
)

// BenchmarkGang512 is issue 7's control-plane target: on the real control
// plane (etcd, kube-apiserver, kube-controller-manager, kwok), a
// 512-pod gang from its first create to all pods observed bound, against the
// apiserver's raw bind rate measured in the same iteration.
//
// Per iteration, on a fresh leaf of 64 nodes and fresh namespaces:
//
//   - ceiling: 512 bare pods (created untimed) bound by the test itself via
//     pods/binding, as the scheduler's identity, with the commit's
//     parallelism; timed from the first bind to all observed bound
//     (informer) → raw-binds/s.
//   - gang: the PodGroup, then per member its 1-GPU ResourceClaim and its
//     pod (pre-created per-pod claims, as a workload controller creating
//     them would; claims from templates would measure kube-controller-
//     manager's 20 QPS client limit instead), with the same parallelism;
//     timed from the first create to all 512 pods observed bound.
//
// The scheduler runs in-process with the shipped RBAC rules and the default
// CommitParallelism; -benchtime 1x -count N gives N control planes.
func BenchmarkGang512(b *testing.B) {
	cp := framework.StartT(b, framework.Options{ControllerManager: true, Kwok: true})
	admin := cp.AdminClient(b)
	itest.Must(b, "grant scheduler rules", framework.GrantSchedulerRules(b.Context(), admin, topology.SchedulerName, itest.RecordNamespace))
	cfg, err := cp.UserConfig(topology.SchedulerName)
	itest.Must(b, "user config", err)
	client, err := kubernetes.NewForConfig(cfg)
	itest.Must(b, "client", err)
	_, err = admin.ResourceV1().DeviceClasses().Create(b.Context(), itest.DeviceClass(topology.GPUDeviceClass, scenario.GPUSelector), metav1.CreateOptions{})
	itest.Must(b, "create device class", err)
	reg := prometheus.NewRegistry()
	metrics, err := scheduler.NewMetrics(reg)
	itest.Must(b, "create metrics", err)
	startBenchScheduler(b, client, scheduler.Config{
		RecordNamespace: itest.RecordNamespace,
		Tree:            topology.TreeConfig{LabelLevels: []string{benchRackLabel, benchLeafLabel}},
		Metrics:         metrics,
	})

	var sum benchResult
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		nodes := benchLeaf(b, admin, i)
		raw := rawBindRate(b, admin, client, fmt.Sprintf("raw-%d", i), nodes)
		b.StartTimer()
		r := gangToBound(b, admin, reg, fmt.Sprintf("gang-%d", i), i)
		r.rawSeconds = raw
		b.Logf("iteration %d: %s", i, r)
		sum.add(r)
	}
	sum.report(b)
}

// benchResult is one iteration's measurements, or their sum.
type benchResult struct {
	n                                 int
	seconds, rawSeconds               float64 // gang to all bound; 512 raw binds
	create, place, commit, firstBound float64 // seconds, see gangToBound
}

// bindPhase is the time from the first to the last pod observed bound.
func (r benchResult) bindPhase() float64 { return r.seconds - r.firstBound }

func (r *benchResult) add(o benchResult) {
	r.n, r.seconds, r.rawSeconds = r.n+1, r.seconds+o.seconds, r.rawSeconds+o.rawSeconds
	r.create, r.place, r.commit, r.firstBound = r.create+o.create, r.place+o.place, r.commit+o.commit, r.firstBound+o.firstBound
}

func (r benchResult) String() string {
	return fmt.Sprintf("all bound %.2fs (creates done %.2fs, placement %.2fs, commit %.2fs, first bound %.2fs, bind phase %.2fs); raw binds %.2fs = %.0f/s; %.0f%% of ceiling",
		r.seconds, r.create, r.place, r.commit, r.firstBound, r.bindPhase(), r.rawSeconds, benchPods/r.rawSeconds, 100*r.rawSeconds/r.seconds)
}

// report reports the means over the iterations. Throughputs are of the
// means (512 / mean seconds).
func (r benchResult) report(b *testing.B) {
	n := float64(r.n)
	gang, raw := r.seconds/n, r.rawSeconds/n
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(gang, "s-to-all-bound")
	b.ReportMetric(benchPods/gang, "pods-bound/s")
	b.ReportMetric(benchPods/raw, "raw-binds/s")
	b.ReportMetric(100*raw/gang, "%-of-ceiling")
	b.ReportMetric(r.create/n, "create-s")
	b.ReportMetric(r.place/n, "place-s")
	b.ReportMetric(r.commit/n, "commit-s")
	b.ReportMetric(r.firstBound/n, "first-bound-s")
	b.ReportMetric(r.bindPhase()/n, "bind-phase-s")
}

// startBenchScheduler runs a Scheduler until the benchmark ends, logging
// at verbosity 0 (benchmark logs are always printed).
func startBenchScheduler(b *testing.B, client kubernetes.Interface, cfg scheduler.Config) {
	b.Cleanup(runScheduler(b, client, cfg))
}

// benchLeaf creates leaf-<i>: 64 kwok nodes with a node-local slice of 8
// GPUs each, 8 nodes per rack and NVLink domain, and waits until kwok made
// them Ready and kube-controller-manager removed the not-ready taint.
// Returns the node names.
func benchLeaf(b *testing.B, c kubernetes.Interface, i int) []string {
	names := make([]string, benchNodes)
	err := forEachParallel(b.Context(), benchWorkers, benchNodes, func(ctx context.Context, j int) error {
		name := fmt.Sprintf("l%d-n%02d", i, j)
		rack := fmt.Sprintf("l%d-r%d", i, j/benchRackNodes)
		names[j] = name
		return createKwokGPUNode(ctx, c, name, "dom-"+rack, map[string]string{benchRackLabel: rack, benchLeafLabel: fmt.Sprintf("leaf-%d", i)})
	})
	itest.Must(b, "create leaf", err)
	benchPoll(b, "kwok nodes ready", func(ctx context.Context) error {
		for _, name := range names {
			n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !itest.NodeReady(n) || len(n.Spec.Taints) > 0 {
				return fmt.Errorf("node %s not ready or tainted %v", name, n.Spec.Taints)
			}
		}
		return nil
	})
	return names
}

// createKwokGPUNode creates a node kwok runs, labelled with its hostname
// and labels, and its node-local slice of benchGPUs GPUs in an NVLink
// domain.
func createKwokGPUNode(ctx context.Context, c kubernetes.Interface, name, domain string, labels map[string]string) error {
	n := itest.Node(name, map[string]string{corev1.LabelHostname: name})
	maps.Copy(n.Labels, labels)
	n.Annotations = map[string]string{framework.KwokNodeAnnotation: "fake"}
	if _, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	if _, err := c.ResourceV1().ResourceSlices().Create(ctx, itest.GPUSlice(name, domain, benchGPUs), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create slice of %s: %w", name, err)
	}
	return nil
}

// rawBindRate creates 512 bare pods in ns (untimed), then binds them to
// nodes round-robin with client and the commit's parallelism, and returns
// the seconds from the first bind to all observed bound. It returns once
// kwok has started them all, so their status updates do not spill into the
// gang's measurement.
func rawBindRate(b *testing.B, admin, client kubernetes.Interface, ns string, nodes []string) float64 {
	benchNamespace(b, admin, ns)
	w := watchPods(b, admin, ns, benchPods)
	err := forEachParallel(b.Context(), benchWorkers, benchPods, func(ctx context.Context, j int) error {
		_, err := admin.CoreV1().Pods(ns).Create(ctx, barePod(ns, fmt.Sprintf("raw-%03d", j)), metav1.CreateOptions{})
		return err
	})
	itest.Must(b, "create bare pods", err)
	w.wait(b, "bare pods seen", func(s podCounts) bool { return s.seen == benchPods })
	start := time.Now()
	err = forEachParallel(b.Context(), benchWorkers, benchPods, func(ctx context.Context, j int) error {
		name := fmt.Sprintf("raw-%03d", j)
		bind := &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: w.pod(name).UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: nodes[j%len(nodes)]},
		}
		return client.CoreV1().Pods(ns).Bind(ctx, bind, metav1.CreateOptions{})
	})
	itest.Must(b, "bind bare pods", err)
	counts := w.wait(b, "bare pods bound", func(s podCounts) bool { return s.bound == benchPods })
	w.wait(b, "bare pods running", func(s podCounts) bool { return s.running == benchPods })
	return counts.allBound.Sub(start).Seconds()
}

func barePod(ns, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/idle:1"}}},
	}
}

func benchNamespace(b *testing.B, c kubernetes.Interface, ns string) {
	_, err := c.CoreV1().Namespaces().Create(b.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	itest.Must(b, "create namespace", err)
	itest.Must(b, "create service account", framework.EnsureServiceAccount(b.Context(), c, ns))
}

// benchPoll polls cond every 200 ms for up to 2 minutes.
func benchPoll(b *testing.B, what string, cond func(context.Context) error) {
	b.Helper()
	var last error
	err := wait.PollUntilContextTimeout(b.Context(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		last = cond(ctx)
		return last == nil, nil
	})
	if err != nil {
		b.Fatalf("%s: %v (last: %v)", what, err, last)
	}
}

// benchGroup is the gang's PodGroup: minCount 512 in one IB leaf.
func benchGroup(ns, name string) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy:      schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: benchPods}},
			SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: benchLeafLabel}}},
		},
	}
}

// allocatedOutside lists the claims not allocated, or with a device
// outside the pools (= nodes) named poolPrefix*.
func allocatedOutside(claims []resourceapi.ResourceClaim, poolPrefix string) []string {
	var out []string
	for _, c := range claims {
		if c.Status.Allocation == nil {
			out = append(out, c.Name+" (unallocated)")
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if !strings.HasPrefix(r.Pool, poolPrefix) {
				out = append(out, c.Name+" on "+r.Pool)
			}
		}
	}
	return out
}

// forEachParallel calls fn(ctx, i) for i in [0, n) on workers goroutines
// and returns the first error.
func forEachParallel(ctx context.Context, workers, n int, fn func(ctx context.Context, i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  int
	)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if first != nil || next >= n {
			return 0, false
		}
		next++
		return next - 1, true
	}
	for range min(workers, n) {
		wg.Go(func() {
			for i, ok := take(); ok; i, ok = take() {
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// gangToBound creates the gang in ns (timed from the first create) and
// waits until its 512 pods are observed bound, then checks every claim is
// allocated on the leaf's nodes. Also returns when the creates were done,
// the first pod observed bound, and the scheduler's placement and commit
// seconds for this gang (from its metrics).
func gangToBound(b *testing.B, admin kubernetes.Interface, reg *prometheus.Registry, ns string, i int) benchResult {
	b.StopTimer()
	benchNamespace(b, admin, ns)
	w := watchPods(b, admin, ns, benchPods)
	before := schedSums(b, reg)
	b.StartTimer()

	start := time.Now()
	_, err := admin.SchedulingV1beta1().PodGroups(ns).Create(b.Context(), benchGroup(ns, "train"), metav1.CreateOptions{})
	itest.Must(b, "create podgroup", err)
	err = forEachParallel(b.Context(), benchWorkers, benchPods, func(ctx context.Context, j int) error {
		claim := fmt.Sprintf("train-%03d-gpu", j)
		if _, err := admin.ResourceV1().ResourceClaims(ns).Create(ctx, itest.GPUClaim(ns, claim, 1), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create claim %s: %w", claim, err)
		}
		pod := itest.MemberPod(ns, fmt.Sprintf("train-%03d", j), "train", "gpu", claim)
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", pod.Name, err)
		}
		return nil
	})
	itest.Must(b, "create gang", err)
	created := time.Since(start)
	counts := w.wait(b, "gang bound", func(s podCounts) bool { return s.bound == benchPods })
	b.StopTimer()

	var after schedMetrics
	benchPoll(b, "commit metric", func(context.Context) error {
		if after = schedSums(b, reg); after.commits == before.commits {
			return fmt.Errorf("commit not finished")
		}
		return nil
	})
	claims, err := admin.ResourceV1().ResourceClaims(ns).List(b.Context(), metav1.ListOptions{})
	itest.Must(b, "list claims", err)
	if bad := allocatedOutside(claims.Items, fmt.Sprintf("l%d-n", i)); len(claims.Items) != benchPods || len(bad) > 0 {
		b.Fatalf("%d claims; not allocated on leaf-%d: %v", len(claims.Items), i, bad)
	}
	w.wait(b, "gang running", func(s podCounts) bool { return s.running == benchPods })
	return benchResult{
		seconds:    counts.allBound.Sub(start).Seconds(),
		create:     created.Seconds(),
		place:      after.place - before.place,
		commit:     after.commit - before.commit,
		firstBound: counts.firstBound.Sub(start).Seconds(),
	}
}

// schedMetrics are sums of the scheduler's duration histograms.
type schedMetrics struct {
	place, commit   float64
	places, commits uint64
}

func schedSums(b *testing.B, reg *prometheus.Registry) schedMetrics {
	mfs, err := reg.Gather()
	itest.Must(b, "gather metrics", err)
	var out schedMetrics
	for _, mf := range mfs {
		if len(mf.GetMetric()) == 0 || mf.GetMetric()[0].GetHistogram() == nil {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		switch mf.GetName() {
		case "gpufabric_scheduler_placement_duration_seconds":
			out.place, out.places = h.GetSampleSum(), h.GetSampleCount()
		case "gpufabric_scheduler_commit_duration_seconds":
			out.commit, out.commits = h.GetSampleSum(), h.GetSampleCount()
		}
	}
	return out
}

// podCounts is what a podWatch has observed.
type podCounts struct {
	seen, bound, running int
	// firstBound and allBound: when the first and the want-th pod were
	// observed bound.
	firstBound, allBound time.Time
}

// podWatch counts the pods of one namespace from an informer.
type podWatch struct {
	want    int
	changed chan struct{}

	mu     sync.Mutex
	pods   map[string]*corev1.Pod
	counts podCounts
	// boundAt: when each bound pod was first observed bound.
	boundAt map[string]time.Time
}

// watchPods starts an informer on ns's pods (stopped when the benchmark
// ends) and returns once it has synced.
func watchPods(b *testing.B, c kubernetes.Interface, ns string, want int) *podWatch {
	w := &podWatch{want: want, changed: make(chan struct{}, 1), pods: map[string]*corev1.Pod{}, boundAt: map[string]time.Time{}}
	factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(ns))
	_, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    w.update,
		UpdateFunc: func(_, obj any) { w.update(obj) },
	})
	itest.Must(b, "watch pods", err)
	runFactory(b, factory)
	return w
}

// runFactory starts an informer factory, waits for its informers, and
// stops it when the benchmark ends.
func runFactory(b *testing.B, factory informers.SharedInformerFactory) {
	stop := make(chan struct{})
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	b.Cleanup(func() {
		close(stop)
		factory.Shutdown()
	})
}

func (w *podWatch) update(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	w.mu.Lock()
	old := w.pods[p.Name]
	w.pods[p.Name] = p
	c := &w.counts
	if old == nil {
		c.seen++
		old = &corev1.Pod{}
	}
	if p.Spec.NodeName != "" && old.Spec.NodeName == "" {
		w.boundAt[p.Name] = now
		c.bound++
		if c.bound == 1 {
			c.firstBound = now
		}
		if c.bound == w.want {
			c.allBound = now
		}
	}
	if p.Status.Phase == corev1.PodRunning && old.Status.Phase != corev1.PodRunning {
		c.running++
	}
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *podWatch) pod(name string) *corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pods[name]
}

// wait blocks until done holds for the counts (up to 2 minutes) and
// returns them; it fails the benchmark on timeout.
func (w *podWatch) wait(b *testing.B, what string, done func(podCounts) bool) podCounts {
	b.Helper()
	c := w.waitUntil(b.Context(), time.Now().Add(2*time.Minute), done)
	if !done(c) {
		b.Fatalf("%s: timed out with %d seen, %d bound, %d running (%v)", what, c.seen, c.bound, c.running, b.Context().Err())
	}
	return c
}

// waitUntil blocks until done holds for the counts, the deadline passes or
// ctx ends, and returns the counts.
func (w *podWatch) waitUntil(ctx context.Context, deadline time.Time, done func(podCounts) bool) podCounts {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		w.mu.Lock()
		c := w.counts
		w.mu.Unlock()
		if done(c) {
			return c
		}
		select {
		case <-w.changed:
		case <-timer.C:
			return c
		case <-ctx.Done():
			return c
		}
	}
}
