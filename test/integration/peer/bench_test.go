package peer

import (
	"context"
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/scenario"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// peerTimeout bounds one run of BenchmarkPeer (GPUFABRIC_PEER_TIMEOUT_S,
// default 240 s): a scheduler that has not bound every pod by then is
// reported with what it bound, and the timeout as its time.
func peerTimeout() time.Duration {
	return time.Duration(envCount("GPUFABRIC_PEER_TIMEOUT_S", 240)) * time.Second
}

// peerScheduler is one scheduler of the comparison: the process whose
// CPU and memory are measured, the schedulerName its pods carry, and its
// name in metric and namespace names.
type peerScheduler struct {
	process, schedulerName, label string
}

// peerSchedulers are the two schedulers BenchmarkPeer compares.
var peerSchedulers = []peerScheduler{{"gpufabric-scheduler", topology.SchedulerName, "gpufabric"}, {"kube-scheduler", corev1.DefaultSchedulerName, "kube"}}

// short is the scheduler's name in metric names: "gpufabric", "kube" or
// "baseline".
func (s peerScheduler) short() string { return s.label }

type peerResult struct {
	seconds float64 // first create to all bound (or to the timeout)
	// created: first create to the last create returned; lastToBound:
	// last create returned to all bound (or to the timeout).
	created, lastToBound float64
	bound                int
	cpu                  time.Duration
	// cpuLast: the scheduler's CPU from the last create to all bound.
	cpuLast time.Duration
	peakRSS int64
	// within: gangs whose pods are all bound inside one unit of the
	// workload (peerWorkload.within).
	within int
	// start: the first create; trees: what became of a tree workload's
	// trees.
	start time.Time
	trees treeRun
}

// BenchmarkPeer is issue 15's side-by-side benchmark (`make bench-peer`):
// gpufabric-scheduler (the binary, as a process) and kube-scheduler v1.37.1
// on one real control plane, the same kwok nodes and identical workloads
// (peerWorkloads; GPUFABRIC_PEER_WORKLOADS selects some),
// GPUFABRIC_PEER_RUNS (default 3) runs per -benchtime iteration,
// interleaved (the order alternates per run). Nodes: see peerCluster.
//
// Per run: seconds from the first create to all pods observed bound, from
// the last create returned to all bound (creates run in parallel, so that
// creating a big gang does not dominate), the scheduler's CPU
// (utime+stime) over the run and its peak RSS; then the run's namespace is
// deleted and drained, so every run starts on an empty cluster. Before each
// iteration's runs, the API floor of every one-gang shape (peerFloor) on
// the same apiserver; each one-gang workload reports (last create → all
// bound) / floor per scheduler.
//
// The CompositePodGroup trees (tree8x16, tree-greedy-trap; trees_test.go)
// also report the trees each scheduler placed, per tree from the first
// create to its last pod bound (treeReport).
//
// GPUFABRIC_PEER_BASELINE_BIN adds a baseline gpufabric-scheduler binary
// to every run (baselineScheduler); GPUFABRIC_PEER_PROFILE_DIR profiles
// the gpufabric schedulers (peerProfiler); GPUFABRIC_PEER_SCHEDULERS
// (gpufabric, kube: a comma list; unset: both) runs only some of them.
func BenchmarkPeer(b *testing.B) {
	runs := envCount("GPUFABRIC_PEER_RUNS", 3)
	workloads := selectPeerWorkloads(b, envCount("GPUFABRIC_PEER_NODES", 1000))
	env := peerCluster(b, slices.ContainsFunc(workloads, func(w peerWorkload) bool { return w.tree != nil }))
	cp, admin, nodes, prof := env.cp, env.admin, env.nodes, env.prof
	floorClient := peerSchedulerClient(b, cp)
	results, floors := map[string][]peerResult{}, map[string][]apiFloor{}
	b.ResetTimer()
	for i := range runs * b.N {
		b.StopTimer()
		for _, shape := range floorShapes(workloads) {
			f := peerFloor(b, admin, floorClient, shape, nodes, fmt.Sprintf("peer-floor-%d-%s", i, shape.name))
			b.Logf("iteration %d, API floor of one %s gang: %.2fs, CPU %.2fs", i, shape.name, f.seconds, f.cpu.Seconds())
			floors[shape.name] = append(floors[shape.name], f)
		}
		for wi, w := range workloads {
			for _, s := range env.lineup.order(i) {
				env.lineup.activate(b, s)
				r := peerRun(b, cp, admin, prof, s, w, fmt.Sprintf("peer-%d-%d-%s", i, wi, s.short()))
				within := ""
				if w.span > 0 {
					within = fmt.Sprintf(", %d/%d gangs in one %s", r.within, w.gangs, w.within)
				}
				b.Logf("iteration %d, %s, %s: %d/%d bound in %.1fs (created in %.1fs, last create to all bound %.2fs)%s, CPU %.2fs (%.2fs after the last create), peak RSS %d MiB",
					i, w.name, s.process, r.bound, w.gangs*w.pods, r.seconds, r.created, r.lastToBound, within, r.cpu.Seconds(), r.cpuLast.Seconds(), r.peakRSS>>20)
				if w.tree != nil {
					b.Logf("iteration %d, %s, %s: %s", i, w.name, s.process, r.trees.describe(w, r.start))
				}
				results[w.name+"/"+s.process] = append(results[w.name+"/"+s.process], r)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	peerReport(b, env.lineup.schedulers(), workloads, results, floors)
	treeReport(b, env.lineup.schedulers(), workloads, results)
}

// peerReport reports BenchmarkPeer's metrics, means over the runs:
// <workload>-<scheduler>-s (first create → all bound), -last-to-bound-s,
// -create-s, -cpu-s, -cpu-last-s (after the last create), -rss-MiB (the
// peak), -within-% (where the workload names a unit), and for one-gang
// workloads <workload>-api-floor-s and -api-floor-cpu-s, and
// <workload>-<scheduler>-floor-x and -cpu-floor-x: the mean last-to-bound
// (CPU after the last create) over the mean floor (floor CPU) of the
// gang's shape.
func peerReport(b *testing.B, schedulers []peerScheduler, workloads []peerWorkload, results map[string][]peerResult, floors map[string][]apiFloor) {
	for _, w := range workloads {
		var floor, floorCPU float64
		for _, f := range floors[floorShapeOf(w).name] {
			floor, floorCPU = floor+f.seconds, floorCPU+f.cpu.Seconds()
		}
		if n := float64(len(floors[floorShapeOf(w).name])); n > 0 {
			floor, floorCPU = floor/n, floorCPU/n
		}
		if w.gangs == 1 {
			b.ReportMetric(floor, w.name+"-api-floor-s")
			b.ReportMetric(floorCPU, w.name+"-api-floor-cpu-s")
		}
		for _, s := range schedulers {
			var sec, created, last, cpu, cpuLast, within float64
			var rss int64
			rs := results[w.name+"/"+s.process]
			for _, r := range rs {
				sec, created, last, cpu, rss = sec+r.seconds, created+r.created, last+r.lastToBound, cpu+r.cpu.Seconds(), max(rss, r.peakRSS)
				cpuLast += r.cpuLast.Seconds()
				within += float64(r.within) / float64(w.gangs)
			}
			n := float64(len(rs))
			prefix := w.name + "-" + s.short()
			b.ReportMetric(sec/n, prefix+"-s")
			b.ReportMetric(last/n, prefix+"-last-to-bound-s")
			b.ReportMetric(created/n, prefix+"-create-s")
			b.ReportMetric(cpu/n, prefix+"-cpu-s")
			b.ReportMetric(cpuLast/n, prefix+"-cpu-last-s")
			b.ReportMetric(float64(rss>>20), prefix+"-rss-MiB")
			if w.span > 0 {
				b.ReportMetric(100*within/n, prefix+"-within-%")
			}
			if w.gangs == 1 && floor > 0 {
				b.ReportMetric(last/n/floor, prefix+"-floor-x")
				b.Logf("%s, %s: last create to all bound %.2fs = %.2f× the API floor (%.2fs)", w.name, s.process, last/n, last/n/floor, floor)
			}
			if w.gangs == 1 && floorCPU > 0 {
				b.ReportMetric(cpuLast/n/floorCPU, prefix+"-cpu-floor-x")
				b.Logf("%s, %s: CPU after the last create %.2fs = %.2f× the API floor's CPU (%.2fs)", w.name, s.process, cpuLast/n, cpuLast/n/floorCPU, floorCPU)
			}
		}
	}
}

// envCount reads a positive count from the environment, or returns def.
func envCount(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// peerEnv is what peerCluster started.
type peerEnv struct {
	cp     *framework.ControlPlane
	admin  kubernetes.Interface
	nodes  int
	prof   *peerProfiler // nil unless GPUFABRIC_PEER_PROFILE_DIR is set
	lineup *peerLineup
}

// peerCluster starts the peer benchmarks' control plane with
// kube-scheduler, creates GPUFABRIC_PEER_NODES (default 1,000) kwok nodes
// × 8 GPUs (peerNodes) and starts gpufabric-scheduler as a process (and
// the baseline binary, stopped, with GPUFABRIC_PEER_BASELINE_BIN). The
// nodes carry the NVLink domain, rack and leaf as labels so that
// kube-scheduler's topology-aware scheduling gets its best chance. Both
// schedulers' clients at framework.KubeSchedulerQPS / KubeSchedulerBurst
// (200 / 2,000); kube-controller-manager at 200 QPS, so that thousands of
// nodes clear their not-ready taints in minutes. With
// GPUFABRIC_PEER_PROFILE_DIR set, the gpufabric schedulers run with
// --profiling (peerProfiler).
//
// trees: the workloads include CompositePodGroup trees; every component
// then runs with the gate CompositePodGroup, kube-apiserver serves
// scheduling.k8s.io/v1alpha3, and gpufabric-scheduler places trees
// (--composite-pod-groups). Without trees the gate stays off: it changes
// kube-scheduler's queue for every workload (no queueing hints).
func peerCluster(b *testing.B, trees bool) *peerEnv {
	nodes := envCount("GPUFABRIC_PEER_NODES", 1000)
	opts := framework.Options{ControllerManager: true, Kwok: true, KubeScheduler: peerSelected(b, peerSchedulers[1]), ControllerManagerQPS: 200}
	if trees {
		opts.CompositePodGroups = true
	}
	cp := framework.StartT(b, opts)
	admin := cp.AdminClient(b)
	itest.Must(b, "grant scheduler rules", framework.GrantSchedulerRules(b.Context(), admin, topology.SchedulerName, itest.RecordNamespace))
	_, err := admin.ResourceV1().DeviceClasses().Create(b.Context(), itest.DeviceClass(topology.GPUDeviceClass, scenario.GPUSelector), metav1.CreateOptions{})
	itest.Must(b, "create device class", err)
	start := time.Now()
	peerNodes(b, admin, nodes)
	b.Logf("%d nodes ready in %.0fs", nodes, time.Since(start).Seconds())
	kc, err := cp.WriteUserKubeconfig(topology.SchedulerName)
	itest.Must(b, "kubeconfig", err)
	prof := newPeerProfiler(b, cp)
	args := []string{"--kubeconfig=" + kc, "--leader-elect=false", "--commit-record-namespace=" + itest.RecordNamespace, "--domain-channels=0",
		"--topology-levels=" + benchRackLabel + "," + benchLeafLabel,
		fmt.Sprintf("--kube-api-qps=%d", framework.KubeSchedulerQPS), fmt.Sprintf("--kube-api-burst=%d", framework.KubeSchedulerBurst)}
	if trees {
		args = append(args, treeSchedulerFlag)
	}
	lineup := startBaseline(b, cp, prof, slices.Clone(args))
	args = append(args, prof.schedulerArgs(b, cp, peerSchedulers[0].process)...)
	if peerSelected(b, peerSchedulers[0]) {
		itest.Must(b, "start gpufabric-scheduler", cp.StartProcess(peerSchedulers[0].process, framework.SchedulerBinary(b), args...))
	}
	return &peerEnv{cp: cp, admin: admin, nodes: nodes, prof: prof, lineup: lineup}
}

// peerSchedulerClient is a client as gpufabric-scheduler's identity, at
// the schedulers' QPS and burst.
func peerSchedulerClient(b *testing.B, cp *framework.ControlPlane) kubernetes.Interface {
	cfg, err := cp.UserConfig(topology.SchedulerName)
	itest.Must(b, "user config", err)
	cfg.QPS, cfg.Burst = framework.KubeSchedulerQPS, framework.KubeSchedulerBurst
	c, err := kubernetes.NewForConfig(cfg)
	itest.Must(b, "client", err)
	return c
}

// peerNodes creates kwok nodes p-nXXXX with their slices, 16 per rack and
// NVLink domain (also a node label), 128 per leaf, and waits until all are
// Ready and untainted.
func peerNodes(b *testing.B, c kubernetes.Interface, nodes int) {
	domainKey := string(topology.Qualified(topology.AttrNVLinkDomain))
	err := forEachParallel(b.Context(), benchWorkers, nodes, func(ctx context.Context, j int) error {
		rack := fmt.Sprintf("p-r%03d", j/16)
		return createKwokGPUNode(ctx, c, fmt.Sprintf("p-n%04d", j), "dom-"+rack,
			map[string]string{benchRackLabel: rack, domainKey: "dom-" + rack, benchLeafLabel: fmt.Sprintf("p-l%02d", j/128)})
	})
	itest.Must(b, "create nodes", err)
	waitNodesReady(b, c, nodes)
}

// waitNodesReady waits up to 20 minutes until n nodes are Ready and
// untainted.
func waitNodesReady(b *testing.B, c kubernetes.Interface, n int) {
	deadline := time.Now().Add(20 * time.Minute)
	for {
		list, err := c.CoreV1().Nodes().List(b.Context(), metav1.ListOptions{ResourceVersion: "0"})
		itest.Must(b, "list nodes", err)
		ready := 0
		for i := range list.Items {
			if itest.NodeReady(&list.Items[i]) && len(list.Items[i].Spec.Taints) == 0 {
				ready++
			}
		}
		if ready >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d nodes ready after 20 minutes", ready, n)
		}
		time.Sleep(2 * time.Second)
	}
}

// peerRun creates one workload for one scheduler in namespace ns and
// measures it (see BenchmarkPeer); prof, when not nil, profiles it.
func peerRun(b *testing.B, cp *framework.ControlPlane, admin kubernetes.Interface, prof *peerProfiler, s peerScheduler, w peerWorkload, ns string) peerResult {
	b.StopTimer()
	benchNamespace(b, admin, ns)
	var leaves []string
	if w.tree != nil && w.tree.trap {
		leaves = trapLeaves(w.gangs)
		trapBackground(b, admin, ns+"-bg", w.gangs)
		// After the run's own namespace (deferred calls run last first).
		defer peerDropNamespace(b, admin, ns+"-bg")
	}
	total := w.gangs * w.pods
	pw := watchPods(b, admin, ns, total)
	before, err := cp.ProcessStats(s.process)
	itest.Must(b, "process stats", err)
	probe := prof.begin(b, cp, s, w, ns)
	b.StartTimer()
	start := time.Now()
	err = forEachParallel(b.Context(), benchWorkers, w.gangs, func(ctx context.Context, g int) error {
		if w.tree != nil {
			return createPeerTree(ctx, admin, ns, g, s.schedulerName, w, leaves)
		}
		return createPeerGang(ctx, admin, ns, peerGroupName(g), s.schedulerName, w)
	})
	itest.Must(b, "create gangs", err)
	created := time.Now()
	atCreated, err := cp.ProcessStats(s.process)
	itest.Must(b, "process stats", err)
	probe.onCreated(b)
	deadline := start.Add(peerTimeout())
	if leaves != nil {
		deadline = created.Add(trapWait())
	}
	counts := pw.waitUntil(b.Context(), deadline, func(c podCounts) bool { return c.bound == total })
	b.StopTimer()
	after, err := cp.ProcessStats(s.process)
	itest.Must(b, "process stats", err)
	end := counts.allBound
	if counts.bound < total {
		end = deadline
	}
	probe.onBound(b, counts, end)
	within := gangsWithin(pw, w)
	var trees treeRun
	if w.tree != nil {
		trees = treesOf(pw, w)
		if trees.placed < w.gangs {
			trees.why = treeWhy(b.Context(), admin, ns)
		}
		trees.warnings = treeWarnings(b.Context(), admin, ns, w, pw)
	}
	// Each run starts on an empty cluster: spread pods left behind would
	// make the next run's gangs fit worse, whichever scheduler made them.
	peerDropNamespace(b, admin, ns)
	return peerResult{seconds: end.Sub(start).Seconds(), created: created.Sub(start).Seconds(), lastToBound: max(0, end.Sub(created).Seconds()),
		bound: counts.bound, cpu: after.CPU - before.CPU, cpuLast: after.CPU - atCreated.CPU, peakRSS: after.PeakRSS, within: within,
		start: start, trees: trees}
}

// peerDropNamespace deletes namespace ns and waits up to 5 minutes until
// it is gone.
func peerDropNamespace(b *testing.B, admin kubernetes.Interface, ns string) {
	itest.Must(b, "delete namespace", admin.CoreV1().Namespaces().Delete(b.Context(), ns, metav1.DeleteOptions{}))
	var last error
	err := wait.PollUntilContextTimeout(b.Context(), 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(last), nil
	})
	if err != nil {
		b.Fatalf("namespace %s not gone: %v (last: %v)", ns, err, last)
	}
}
