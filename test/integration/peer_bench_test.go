package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/placement/placementtest"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// peerTimeout bounds one run of BenchmarkPeer: a scheduler that has not
// bound every pod by then is reported with what it bound.
const peerTimeout = 4 * time.Minute

// peerWorkload is one shape of BenchmarkPeer: gangs of pods, each pod with
// its own claim for gpus GPUs; key, when set, is the PodGroup's required
// topology level (a node label both schedulers know).
type peerWorkload struct {
	name             string
	gangs, pods, gpu int
	key              string
	// within names the unit the benchmark checks each gang landed in (one
	// NVLink domain of 16 nodes, or one leaf of 128), span its nodes.
	within string
	span   int
}

// peerScheduler is one scheduler of the comparison: the process whose
// CPU and memory are measured, and the schedulerName its pods carry.
type peerScheduler struct {
	process, schedulerName string
}

type peerResult struct {
	seconds float64 // first create to all bound (or to the timeout)
	bound   int
	cpu     time.Duration
	peakRSS int64
	// within: gangs whose pods are all bound inside one unit of the
	// workload (peerWorkload.within).
	within int
}

// BenchmarkPeer is issue 15's side-by-side benchmark (`make bench-peer`):
// gpufabric-scheduler (the binary, as a process) and kube-scheduler v1.37.1
// on one real control plane, the same kwok nodes and identical workloads,
// GPUFABRIC_PEER_RUNS (default 3) runs per -benchtime iteration,
// interleaved (the order alternates per run). Nodes:
// GPUFABRIC_PEER_NODES (default 1,000) × 8 GPUs, node-local slices created
// directly; 16 nodes per rack = NVLink domain, 8 racks per IB leaf; the
// nodes carry the domain, rack and leaf as labels so that kube-scheduler's
// topology-aware scheduling gets its best chance. Both schedulers' clients
// at 200 QPS / 2,000 burst; kube-controller-manager at 200 QPS, so that
// thousands of nodes clear their not-ready taints in minutes. Per run: wall time from the first create to all pods
// observed bound, the scheduler's CPU (utime+stime) over that window, and
// its peak RSS; then the run's namespace is deleted and drained, so every
// run starts on an empty cluster.
func BenchmarkPeer(b *testing.B) {
	nodes, runs := envCount("GPUFABRIC_PEER_NODES", 1000), envCount("GPUFABRIC_PEER_RUNS", 3)
	cp := framework.StartT(b, framework.Options{ControllerManager: true, Kwok: true, KubeScheduler: true, ControllerManagerQPS: 200})
	admin := cp.AdminClient(b)
	benchMust(b, "grant scheduler rules", framework.GrantSchedulerRules(b.Context(), admin, topology.SchedulerName, recordNamespace))
	_, err := admin.ResourceV1().DeviceClasses().Create(b.Context(), schedDeviceClass(topology.GPUDeviceClass, placementtest.GPUSelector), metav1.CreateOptions{})
	benchMust(b, "create device class", err)
	start := time.Now()
	peerNodes(b, admin, nodes)
	b.Logf("%d nodes ready in %.0fs", nodes, time.Since(start).Seconds())
	kc, err := cp.WriteUserKubeconfig(topology.SchedulerName)
	benchMust(b, "kubeconfig", err)
	benchMust(b, "start gpufabric-scheduler", cp.StartProcess("gpufabric-scheduler", framework.SchedulerBinary(b), "--kubeconfig="+kc,
		"--leader-elect=false", "--commit-record-namespace="+recordNamespace, "--metrics-address=", "--domain-channels=0",
		"--topology-levels="+benchRackLabel+","+benchLeafLabel,
		fmt.Sprintf("--kube-api-qps=%d", framework.KubeSchedulerQPS), fmt.Sprintf("--kube-api-burst=%d", framework.KubeSchedulerBurst)))

	scheds := []peerScheduler{{"gpufabric-scheduler", topology.SchedulerName}, {"kube-scheduler", corev1.DefaultSchedulerName}}
	workloads := []peerWorkload{
		{name: "100x3x1gpu", gangs: 100, pods: 3, gpu: 1, within: "NVLink domain", span: 16},
		{name: "64x8gpu-leaf", gangs: 1, pods: 64, gpu: 8, key: benchLeafLabel, within: "leaf", span: 128},
	}
	results := map[string][]peerResult{}
	b.ResetTimer()
	for i := range runs * b.N {
		for wi, w := range workloads {
			order := scheds
			if i%2 == 1 {
				order = []peerScheduler{scheds[1], scheds[0]}
			}
			for _, s := range order {
				ns := fmt.Sprintf("peer-%d-%d-%s", i, wi, strings.SplitN(s.process, "-", 2)[0])
				r := peerRun(b, cp, admin, s, w, ns)
				b.Logf("iteration %d, %s, %s: %d/%d bound in %.1fs, %d/%d gangs in one %s, CPU %.1fs, peak RSS %d MiB", i, w.name, s.process,
					r.bound, w.gangs*w.pods, r.seconds, r.within, w.gangs, w.within, r.cpu.Seconds(), r.peakRSS>>20)
				results[w.name+"/"+s.process] = append(results[w.name+"/"+s.process], r)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	for _, w := range workloads {
		for _, s := range scheds {
			var sec, cpu, within float64
			var rss int64
			rs := results[w.name+"/"+s.process]
			for _, r := range rs {
				sec, cpu, rss = sec+r.seconds, cpu+r.cpu.Seconds(), max(rss, r.peakRSS)
				within += float64(r.within) / float64(w.gangs)
			}
			n := float64(len(rs))
			prefix := w.name + "-" + strings.SplitN(s.process, "-", 2)[0]
			b.ReportMetric(sec/n, prefix+"-s")
			b.ReportMetric(cpu/n, prefix+"-cpu-s")
			b.ReportMetric(float64(rss>>20), prefix+"-rss-MiB")
			b.ReportMetric(100*within/n, prefix+"-within-%")
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
	benchMust(b, "create nodes", err)
	waitNodesReady(b, c, nodes)
}

// waitNodesReady waits up to 20 minutes until n nodes are Ready and
// untainted.
func waitNodesReady(b *testing.B, c kubernetes.Interface, n int) {
	deadline := time.Now().Add(20 * time.Minute)
	for {
		list, err := c.CoreV1().Nodes().List(b.Context(), metav1.ListOptions{ResourceVersion: "0"})
		benchMust(b, "list nodes", err)
		ready := 0
		for i := range list.Items {
			if nodeReady(&list.Items[i]) && len(list.Items[i].Spec.Taints) == 0 {
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
// measures it (see BenchmarkPeer).
func peerRun(b *testing.B, cp *framework.ControlPlane, admin kubernetes.Interface, s peerScheduler, w peerWorkload, ns string) peerResult {
	b.StopTimer()
	benchNamespace(b, admin, ns)
	total := w.gangs * w.pods
	pw := watchPods(b, admin, ns, total)
	before, err := cp.ProcessStats(s.process)
	benchMust(b, "process stats", err)
	b.StartTimer()
	start := time.Now()
	err = forEachParallel(b.Context(), benchWorkers, w.gangs, func(ctx context.Context, g int) error {
		return createPeerGang(ctx, admin, ns, fmt.Sprintf("g%03d", g), s.schedulerName, w)
	})
	benchMust(b, "create gangs", err)
	counts := pw.waitUntil(b.Context(), start.Add(peerTimeout), func(c podCounts) bool { return c.bound == total })
	b.StopTimer()
	after, err := cp.ProcessStats(s.process)
	benchMust(b, "process stats", err)
	end := counts.allBound
	if counts.bound < total {
		end = start.Add(peerTimeout)
	}
	// Each run starts on an empty cluster: spread pods left behind would
	// make the next run's gangs fit worse, whichever scheduler made them.
	benchMust(b, "delete namespace", admin.CoreV1().Namespaces().Delete(b.Context(), ns, metav1.DeleteOptions{}))
	benchPoll(b, "namespace "+ns+" gone", func(ctx context.Context) error {
		if _, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("namespace still there: %v", err)
		}
		return nil
	})
	return peerResult{seconds: end.Sub(start).Seconds(), bound: counts.bound, cpu: after.CPU - before.CPU, peakRSS: after.PeakRSS,
		within: gangsWithin(pw, w)}
}

// gangsWithin counts the gangs whose pods are all bound to nodes of one
// unit of w.span nodes (peerNodes numbers them p-nXXXX, 16 per NVLink
// domain, 128 per leaf).
func gangsWithin(pw *podWatch, w peerWorkload) int {
	n := 0
	for g := range w.gangs {
		domains := map[int]bool{}
		for j := range w.pods {
			p := pw.pod(fmt.Sprintf("g%03d-%02d", g, j))
			if p == nil || p.Spec.NodeName == "" {
				domains[-1] = true
				continue
			}
			i, err := strconv.Atoi(strings.TrimPrefix(p.Spec.NodeName, "p-n"))
			if err != nil {
				domains[-2] = true
				continue
			}
			domains[i/w.span] = true
		}
		if len(domains) == 1 && !domains[-1] && !domains[-2] {
			n++
		}
	}
	return n
}

// createPeerGang creates a PodGroup and, per member, its claim and pod.
func createPeerGang(ctx context.Context, c kubernetes.Interface, ns, group, schedulerName string, w peerWorkload) error {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: group},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(w.pods)}}}}
	if w.key != "" {
		pg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: w.key}}}
	}
	if _, err := c.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create podgroup %s: %w", group, err)
	}
	for j := range w.pods {
		claim := fmt.Sprintf("%s-%02d-gpu", group, j)
		if _, err := c.ResourceV1().ResourceClaims(ns).Create(ctx, gpuClaim(ns, claim, int64(w.gpu)), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create claim %s: %w", claim, err)
		}
		p := memberPod(ns, fmt.Sprintf("%s-%02d", group, j), group, "gpu", claim)
		p.Spec.SchedulerName = schedulerName
		if _, err := c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %s: %w", p.Name, err)
		}
	}
	return nil
}
