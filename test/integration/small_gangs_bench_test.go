package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// smallGangs is how many 3-pod one-GPU gangs each run of
// BenchmarkSmallGangs creates.
const smallGangs = 100

// BenchmarkSmallGangs is issue 15's small-gang shape on the real control
// plane: GPUFABRIC_BENCH_NODES (default 1,000) kwok nodes × 8 GPUs, 16 per
// rack and NVLink domain, slices created directly (peerNodes); per
// iteration two runs,
// interleaved, each with a fresh in-process scheduler and 100 gangs of 3
// one-GPU pods (PodGroup minCount 3, claims pre-created, 16 creates in
// parallel): first with the snapshot cache, then rebuilding the snapshot
// from the listers each attempt (the baseline, Config.RebuildSnapshots).
// Reports, per variant, seconds from the first create to all 300 pods
// bound, gangs bound per second, and the scheduler's placement and commit
// milliseconds per gang (its histograms).
func BenchmarkSmallGangs(b *testing.B) {
	nodes := envCount("GPUFABRIC_BENCH_NODES", 1000)
	cp := framework.StartT(b, framework.Options{ControllerManager: true, Kwok: true})
	admin := cp.AdminClient(b)
	benchMust(b, "grant scheduler rules", framework.GrantSchedulerRules(b.Context(), admin, topology.SchedulerName, recordNamespace))
	cfg, err := cp.UserConfig(topology.SchedulerName)
	benchMust(b, "user config", err)
	cfg.QPS, cfg.Burst = 1000, 2000
	client, err := kubernetes.NewForConfig(cfg)
	benchMust(b, "client", err)
	_, err = admin.ResourceV1().DeviceClasses().Create(b.Context(), schedDeviceClass(topology.GPUDeviceClass, placementtest.GPUSelector), metav1.CreateOptions{})
	benchMust(b, "create device class", err)
	start := time.Now()
	peerNodes(b, admin, nodes)
	b.Logf("%d nodes ready in %.0fs", nodes, time.Since(start).Seconds())

	var sums [2]smallGangResult
	b.ResetTimer()
	for i := range b.N {
		for v, rebuild := range []bool{false, true} {
			r := smallGangRun(b, admin, client, fmt.Sprintf("small-%d-%d", i, v), rebuild)
			b.Logf("iteration %d, rebuild snapshots %v: %s", i, rebuild, r)
			sums[v].add(r)
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	for v, name := range []string{"cached", "rebuilt"} {
		n := float64(sums[v].n)
		b.ReportMetric(sums[v].seconds/n, name+"-s-to-all-bound")
		b.ReportMetric(smallGangs*n/sums[v].seconds, name+"-gangs/s")
		b.ReportMetric(1000*sums[v].place/sums[v].places, name+"-place-ms/gang")
		b.ReportMetric(1000*sums[v].commit/sums[v].commits, name+"-commit-ms/gang")
	}
}

type smallGangResult struct {
	n                      int
	seconds, place, commit float64
	places, commits        float64
}

func (r *smallGangResult) add(o smallGangResult) {
	r.n++
	r.seconds, r.place, r.commit = r.seconds+o.seconds, r.place+o.place, r.commit+o.commit
	r.places, r.commits = r.places+o.places, r.commits+o.commits
}

func (r smallGangResult) String() string {
	return fmt.Sprintf("%d gangs bound in %.1fs (%.1f gangs/s); placement %.2f ms per attempt (%0.f attempts), commit %.1f ms per gang",
		smallGangs, r.seconds, smallGangs/r.seconds, 1000*r.place/r.places, r.places, 1000*r.commit/r.commits)
}

// smallGangRun runs one scheduler (stopped at the end) and times 100 gangs
// of 3 one-GPU pods in namespace ns from the first create to all bound.
func smallGangRun(b *testing.B, admin, client kubernetes.Interface, ns string, rebuild bool) smallGangResult {
	b.StopTimer()
	benchNamespace(b, admin, ns)
	reg := prometheus.NewRegistry()
	metrics, err := scheduler.NewMetrics(reg)
	benchMust(b, "create metrics", err)
	stop := runScheduler(b, client, scheduler.Config{RecordNamespace: recordNamespace, Metrics: metrics, RebuildSnapshots: rebuild,
		Tree: topology.TreeConfig{LabelLevels: []string{benchRackLabel}}})
	defer stop()
	w := watchPods(b, admin, ns, 3*smallGangs)
	b.StartTimer()
	start := time.Now()
	err = forEachParallel(b.Context(), benchWorkers, smallGangs, func(ctx context.Context, g int) error {
		group := fmt.Sprintf("g%03d", g)
		pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: group},
			Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 3}}}}
		if _, err := admin.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create podgroup %s: %w", group, err)
		}
		for j := range 3 {
			claim := fmt.Sprintf("%s-%d-gpu", group, j)
			if _, err := admin.ResourceV1().ResourceClaims(ns).Create(ctx, gpuClaim(ns, claim, 1), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create claim %s: %w", claim, err)
			}
			if _, err := admin.CoreV1().Pods(ns).Create(ctx, memberPod(ns, fmt.Sprintf("%s-%d", group, j), group, "gpu", claim), metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create pod: %w", err)
			}
		}
		return nil
	})
	benchMust(b, "create gangs", err)
	counts := w.wait(b, "gangs bound", func(s podCounts) bool { return s.bound == 3*smallGangs })
	b.StopTimer()
	var m schedMetrics
	benchPoll(b, "commit metric", func(context.Context) error {
		if m = schedSums(b, reg); m.commits < smallGangs {
			return fmt.Errorf("%d commits", m.commits)
		}
		return nil
	})
	return smallGangResult{seconds: counts.allBound.Sub(start).Seconds(), place: m.place, places: float64(m.places), commit: m.commit, commits: float64(m.commits)}
}

// runScheduler runs a Scheduler until the returned stop is called.
func runScheduler(b *testing.B, client kubernetes.Interface, cfg scheduler.Config) func() {
	logger := ktesting.NewLogger(b, ktesting.NewConfig(ktesting.Verbosity(0)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	cfg.Client = client
	s, err := scheduler.New(cfg)
	benchMust(b, "create scheduler", err)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("scheduler: %v", err)
		}
	}
}
