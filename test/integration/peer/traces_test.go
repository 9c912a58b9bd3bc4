package peer

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// traceShapes is the fixed mixed gang shape of the trace benchmarks: gang
// g has shape traceShapes[g % len(traceShapes)], the same sequence for
// both schedulers (396 GPUs per cycle; rack = NVLink domain of 16 nodes,
// leaf = 128 nodes).
var traceShapes = []peerWorkload{
	{name: "4x8gpu-rack", gangs: 1, pods: 4, gpu: 8, key: benchRackLabel},
	{name: "2x4gpu", gangs: 1, pods: 2, gpu: 4},
	{name: "8x8gpu-rack", gangs: 1, pods: 8, gpu: 8, key: benchRackLabel},
	{name: "16x1gpu-rack", gangs: 1, pods: 16, gpu: 1, key: benchRackLabel},
	{name: "3x2gpu", gangs: 1, pods: 3, gpu: 2},
	{name: "1x8gpu", gangs: 1, pods: 1, gpu: 8},
	{name: "32x8gpu-leaf", gangs: 1, pods: 32, gpu: 8, key: benchLeafLabel},
	{name: "6x1gpu", gangs: 1, pods: 6, gpu: 1},
}

func traceShape(g int) peerWorkload { return traceShapes[g%len(traceShapes)] }

// peerTraceOrder is the order of the schedulers in trace run i: it
// alternates per run (those GPUFABRIC_PEER_SCHEDULERS names).
func peerTraceOrder(i int) []peerScheduler {
	var out []peerScheduler
	for _, s := range peerSchedulers {
		if peerSelected(nil, s) {
			out = append(out, s)
		}
	}
	if i%2 == 1 {
		slices.Reverse(out)
	}
	return out
}

// BenchmarkPeerFill is issue 15's fill-to-first-refusal trace (`make
// bench-peer-traces`), on peerCluster's nodes and schedulers:
// GPUFABRIC_PEER_TRACE_RUNS (default 1) runs per -benchtime iteration,
// per scheduler (the order alternates per run), each in a fresh namespace
// on an empty cluster. A run creates gangs of traceShapes one at a time,
// each once the previous one is bound, until a gang stays not fully bound
// for GPUFABRIC_PEER_FILL_WAIT_S (default 10) seconds: the first refusal.
// Reports per scheduler the GPUs of bound pods at that point as a % of all
// GPUs (fill-<scheduler>-alloc-%), the gangs bound before it
// (-gangs) and the seconds from the first create to the refused gang's
// create (-s); means over the runs.
func BenchmarkPeerFill(b *testing.B) {
	runs := envCount("GPUFABRIC_PEER_TRACE_RUNS", 1)
	patience := time.Duration(envCount("GPUFABRIC_PEER_FILL_WAIT_S", 10)) * time.Second
	env := peerCluster(b, false)
	admin, nodes := env.admin, env.nodes
	sums := map[string]*fillResult{}
	b.ResetTimer()
	for i := range runs * b.N {
		for _, s := range peerTraceOrder(i) {
			r := peerFill(b, admin, s, fmt.Sprintf("fill-%d-%s", i, s.short()), nodes, patience)
			b.Logf("run %d, %s: %d gangs bound in %.1fs, then %s refused for %v; %d of %d GPUs allocated (%.1f%%)",
				i, s.process, r.gangs, r.seconds, traceShape(r.gangs).name, patience, r.gpus, nodes*benchGPUs, 100*float64(r.gpus)/float64(nodes*benchGPUs))
			if sums[s.process] == nil {
				sums[s.process] = &fillResult{}
			}
			sums[s.process].add(r)
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	for _, s := range peerTraceOrder(0) {
		r, n := sums[s.process], float64(runs*b.N)
		b.ReportMetric(100*float64(r.gpus)/n/float64(nodes*benchGPUs), "fill-"+s.short()+"-alloc-%")
		b.ReportMetric(float64(r.gangs)/n, "fill-"+s.short()+"-gangs")
		b.ReportMetric(r.seconds/n, "fill-"+s.short()+"-s")
	}
}

type fillResult struct {
	gangs, gpus int
	seconds     float64
}

func (r *fillResult) add(o fillResult) {
	r.gangs, r.gpus, r.seconds = r.gangs+o.gangs, r.gpus+o.gpus, r.seconds+o.seconds
}

// peerFill is one run of BenchmarkPeerFill for scheduler s in namespace ns
// (deleted and drained before it returns).
func peerFill(b *testing.B, admin kubernetes.Interface, s peerScheduler, ns string, nodes int, patience time.Duration) fillResult {
	b.StopTimer()
	benchNamespace(b, admin, ns)
	pw := watchPods(b, admin, ns, 0)
	b.StartTimer()
	start := time.Now()
	var r fillResult
	pods := 0 // of the gangs bound so far
	for g := 0; ; g++ {
		w := traceShape(g)
		r.seconds = time.Since(start).Seconds()
		itest.Must(b, "create gang", createPeerGang(b.Context(), admin, ns, peerGroupName(g), s.schedulerName, w))
		c := pw.waitUntil(b.Context(), time.Now().Add(patience), func(c podCounts) bool { return c.bound == pods+w.pods })
		if c.bound < pods+w.pods || g+1 >= 10000 {
			// A gang bound in part (neither scheduler should) counts what
			// it holds.
			r.gpus += (c.bound - pods) * w.gpu
			break
		}
		pods += w.pods
		r.gangs++
		r.gpus += w.pods * w.gpu
	}
	b.StopTimer()
	peerDropNamespace(b, admin, ns)
	return r
}
