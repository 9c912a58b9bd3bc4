package peer

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// smallGangs is how many 3-pod one-GPU gangs each run of
// BenchmarkSmallGangs creates.
const smallGangs = 100

// smallGangVariant is one scheduler configuration of BenchmarkSmallGangs.
type smallGangVariant struct {
	name            string
	rebuild, serial bool
}

// BenchmarkSmallGangs is issue 15's small-gang shape on the real control
// plane: GPUFABRIC_BENCH_NODES (default 1,000) kwok nodes × 8 GPUs, 16 per
// rack and NVLink domain, slices created directly (peerNodes); per
// iteration one run per variant, interleaved, each with a fresh in-process
// scheduler and a backlog of 100 gangs of 3 one-GPU pods (PodGroup
// minCount 3, claims pre-created) made before the scheduler starts, so the
// rate measured is the scheduler's, not the test's creates. Variants: the
// shipped one (snapshot cache, pipelined commits), commits made serial
// (Config.SerialCommits), and serial commits with the snapshot rebuilt from
// the listers each attempt (Config.RebuildSnapshots, the state before
// both). Reports, per variant, seconds from the scheduler's first attempt
// (after its informers synced) to all 300 pods bound, gangs bound per
// second, and placement and commit milliseconds per gang (its histograms).
func BenchmarkSmallGangs(b *testing.B) {
	nodes := envCount("GPUFABRIC_BENCH_NODES", 1000)
	cp := framework.StartT(b, framework.Options{ControllerManager: true, Kwok: true})
	admin := cp.AdminClient(b)
	itest.Must(b, "grant scheduler rules", framework.GrantSchedulerRules(b.Context(), admin, topology.SchedulerName, itest.RecordNamespace))
	cfg, err := cp.UserConfig(topology.SchedulerName)
	itest.Must(b, "user config", err)
	cfg.QPS, cfg.Burst = 1000, 2000
	client, err := kubernetes.NewForConfig(cfg)
	itest.Must(b, "client", err)
	_, err = admin.ResourceV1().DeviceClasses().Create(b.Context(), itest.DeviceClass(topology.GPUDeviceClass, scenario.GPUSelector), metav1.CreateOptions{})
	itest.Must(b, "create device class", err)
	start := time.Now()
	peerNodes(b, admin, nodes)
	b.Logf("%d nodes ready in %.0fs", nodes, time.Since(start).Seconds())

	variants := []smallGangVariant{{name: "pipelined"}, {name: "serial", serial: true}, {name: "serial-rebuilt", serial: true, rebuild: true}}
	sums := make([]smallGangResult, len(variants))
	b.ResetTimer()
	for i := range b.N {
		for vi, v := range variants {
			r := smallGangRun(b, admin, client, fmt.Sprintf("small-%d-%d", i, vi), v)
			b.Logf("iteration %d, %s: %s", i, v.name, r)
			sums[vi].add(r)
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	for vi, v := range variants {
		n := float64(sums[vi].n)
		b.ReportMetric(sums[vi].seconds/n, v.name+"-s-to-all-bound")
		b.ReportMetric(smallGangs*n/sums[vi].seconds, v.name+"-gangs/s")
		b.ReportMetric(1000*sums[vi].place/sums[vi].places, v.name+"-place-ms/gang")
		b.ReportMetric(1000*sums[vi].commit/sums[vi].commits, v.name+"-commit-ms/gang")
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
	return fmt.Sprintf("%d gangs bound in %.2fs (%.1f gangs/s); placement %.2f ms per attempt (%0.f attempts), commit %.1f ms per gang",
		smallGangs, r.seconds, smallGangs/r.seconds, 1000*r.place/r.places, r.places, 1000*r.commit/r.commits)
}

// smallGangRun creates 100 gangs of 3 one-GPU pods in namespace ns, then
// runs one scheduler (stopped at the end) and times it from its first
// attempt to all bound.
func smallGangRun(b *testing.B, admin, client kubernetes.Interface, ns string, v smallGangVariant) smallGangResult {
	b.StopTimer()
	benchNamespace(b, admin, ns)
	w := watchPods(b, admin, ns, 3*smallGangs)
	err := forEachParallel(b.Context(), benchWorkers, smallGangs, func(ctx context.Context, g int) error {
		return createPeerGang(ctx, admin, ns, fmt.Sprintf("g%03d", g), topology.SchedulerName, peerWorkload{gangs: smallGangs, pods: 3, gpu: 1})
	})
	itest.Must(b, "create gangs", err)
	reg := prometheus.NewRegistry()
	metrics, err := scheduler.NewMetrics(reg)
	itest.Must(b, "create metrics", err)
	started := make(chan time.Time, 1)
	b.StartTimer()
	stop := runScheduler(b, client, scheduler.Config{RecordNamespace: itest.RecordNamespace, Metrics: metrics, RebuildSnapshots: v.rebuild,
		SerialCommits: v.serial, Tree: topology.TreeConfig{LabelLevels: []string{benchRackLabel}},
		OnRecovered: func() { started <- time.Now() }})
	defer stop()
	counts := w.wait(b, "gangs bound", func(s podCounts) bool { return s.bound == 3*smallGangs })
	b.StopTimer()
	start := <-started
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
	itest.Must(b, "create scheduler", err)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("scheduler: %v", err)
		}
	}
}
