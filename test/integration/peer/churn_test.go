package peer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// BenchmarkPeerChurn is issue 15's churn trace (`make bench-peer-traces`),
// on peerCluster's nodes and schedulers: GPUFABRIC_PEER_TRACE_RUNS
// (default 1) runs per -benchtime iteration, per scheduler (the order
// alternates per run), each in a fresh namespace on an empty cluster;
// with GPUFABRIC_PEER_BASELINE_BIN the baseline binary too (peerLineup).
//
// A run is a steady state of arrivals and departures: gangs of
// traceShapes arrive whenever fewer than GPUFABRIC_PEER_CHURN_PENDING
// (default 4) gangs wait to be bound; a bound gang runs for a lifetime
// drawn uniformly from [L/2, 3L/2], L = GPUFABRIC_PEER_CHURN_LIFE_S
// (default 30), the same per gang for both schedulers, then finishes (its
// pods, claims and PodGroup are deleted). After a warm-up of
// GPUFABRIC_PEER_CHURN_WARMUP_S (default 30) seconds, for
// GPUFABRIC_PEER_CHURN_S (default 90) seconds, it measures gangs bound
// per second (churn-<scheduler>-gangs/s), the time-averaged GPUs held by
// bound gangs as a % of all GPUs (-alloc-%), the mean seconds from a
// gang's create to all its pods observed bound (-bind-s), and that mean
// with the gangs still waiting at the window's end counted with their age
// (-wait-s: -bind-s leaves them out, so it favours the scheduler that
// leaves more of the slowest gangs unplaced); means over the runs. Each
// run also logs the mean per shape and the gangs still waiting.
func BenchmarkPeerChurn(b *testing.B) {
	runs := envCount("GPUFABRIC_PEER_TRACE_RUNS", 1)
	cfg := churnConfig{
		pending: envCount("GPUFABRIC_PEER_CHURN_PENDING", 4),
		life:    time.Duration(envCount("GPUFABRIC_PEER_CHURN_LIFE_S", 30)) * time.Second,
		warmup:  time.Duration(envCount("GPUFABRIC_PEER_CHURN_WARMUP_S", 30)) * time.Second,
		window:  time.Duration(envCount("GPUFABRIC_PEER_CHURN_S", 90)) * time.Second,
	}
	env := peerCluster(b, false)
	admin, nodes := env.admin, env.nodes
	sums := map[string]*churnResult{}
	b.ResetTimer()
	for i := range runs * b.N {
		for _, s := range env.lineup.order(i) {
			b.StopTimer()
			env.lineup.activate(b, s)
			r := peerChurn(b, admin, s, fmt.Sprintf("churn-%d-%s", i, s.short()), nodes, cfg)
			b.Logf("run %d, %s: %.2f gangs/s bound, %.1f%% of GPUs allocated on average, %.2fs mean create to bound (%d gangs bound in the window; %.2fs with those still waiting at its end)",
				i, s.process, r.gangsPerSec, r.allocPct, r.bindSec, r.bound, r.waitSec)
			if sums[s.process] == nil {
				sums[s.process] = &churnResult{}
			}
			sums[s.process].add(r)
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	for _, s := range env.lineup.schedulers() {
		r, n := sums[s.process], float64(runs*b.N)
		b.ReportMetric(r.gangsPerSec/n, "churn-"+s.short()+"-gangs/s")
		b.ReportMetric(r.allocPct/n, "churn-"+s.short()+"-alloc-%")
		b.ReportMetric(r.bindSec/n, "churn-"+s.short()+"-bind-s")
		b.ReportMetric(r.waitSec/n, "churn-"+s.short()+"-wait-s")
	}
}

type churnConfig struct {
	pending              int
	life, warmup, window time.Duration
}

type churnResult struct {
	bound                          int
	gangsPerSec, allocPct, bindSec float64
	// waitSec is bindSec with the gangs still waiting at the window's end
	// counted too, with their age then: a scheduler that leaves its
	// slowest gangs unplaced gets no lower mean for it.
	waitSec float64
}

func (r *churnResult) add(o churnResult) {
	r.bound += o.bound
	r.gangsPerSec, r.allocPct, r.bindSec = r.gangsPerSec+o.gangsPerSec, r.allocPct+o.allocPct, r.bindSec+o.bindSec
	r.waitSec += o.waitSec
}

// churnGang is a gang of a churn run: created, bound (zero while
// pending) and when it finishes.
type churnGang struct {
	g                     int
	created, bound, until time.Time
}

// churnRun is the state of one churn run.
type churnRun struct {
	b                      *testing.B
	admin                  kubernetes.Interface
	s                      peerScheduler
	ns                     string
	pw                     *podWatch
	life                   time.Duration
	next                   int // the next gang to create
	pending, running       []*churnGang
	gpus                   int // held by running gangs
	measureFrom, measureTo time.Time
	bound                  int     // gangs bound in the window
	bindSum, gpuSeconds    float64 // over the window
	// byShape: gangs bound in the window and their create → bound
	// seconds, per traceShapes name.
	byShape map[string]*shapeWait
}

// shapeWait sums the create → bound seconds of one shape's gangs.
type shapeWait struct {
	n   int
	sum float64
}

// peerChurn is one run of BenchmarkPeerChurn for scheduler s in namespace
// ns (deleted and drained before it returns).
func peerChurn(b *testing.B, admin kubernetes.Interface, s peerScheduler, ns string, nodes int, cfg churnConfig) churnResult {
	b.StopTimer()
	benchNamespace(b, admin, ns)
	r := &churnRun{b: b, admin: admin, s: s, ns: ns, pw: watchPods(b, admin, ns, 0), life: cfg.life, byShape: map[string]*shapeWait{}}
	b.StartTimer()
	r.measureFrom = time.Now().Add(cfg.warmup)
	r.measureTo = r.measureFrom.Add(cfg.window)
	last := time.Now()
	for now := last; now.Before(r.measureTo); now = time.Now() {
		if now.After(r.measureFrom) {
			r.gpuSeconds += float64(r.gpus) * now.Sub(maxTime(last, r.measureFrom)).Seconds()
		}
		last = now
		r.observe(now)
		r.retire(now)
		for len(r.pending) < cfg.pending {
			r.admit()
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.StopTimer()
	r.report()
	peerDropNamespace(b, admin, ns)
	out := churnResult{bound: r.bound, gangsPerSec: float64(r.bound) / cfg.window.Seconds(),
		allocPct: 100 * r.gpuSeconds / cfg.window.Seconds() / float64(nodes*benchGPUs)}
	if r.bound > 0 {
		out.bindSec = r.bindSum / float64(r.bound)
	}
	waited := r.bindSum
	for _, cg := range r.pending {
		waited += r.measureTo.Sub(cg.created).Seconds()
	}
	if n := r.bound + len(r.pending); n > 0 {
		out.waitSec = waited / float64(n)
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// observe moves the pending gangs whose pods are all bound to running.
func (r *churnRun) observe(now time.Time) {
	still := r.pending[:0]
	for _, cg := range r.pending {
		w := traceShape(cg.g)
		bound := 0
		for j := range w.pods {
			if p := r.pw.pod(peerPodName(peerGroupName(cg.g), j)); p != nil && p.Spec.NodeName != "" {
				bound++
			}
		}
		if bound < w.pods {
			still = append(still, cg)
			continue
		}
		cg.bound = now
		cg.until = now.Add(r.life/2 + time.Duration(rand.New(rand.NewPCG(15, uint64(cg.g))).Int64N(int64(r.life)+1)))
		r.running = append(r.running, cg)
		r.gpus += w.pods * w.gpu
		if now.After(r.measureFrom) && now.Before(r.measureTo) {
			r.bound++
			r.bindSum += now.Sub(cg.created).Seconds()
			sw := r.byShape[w.name]
			if sw == nil {
				sw = &shapeWait{}
				r.byShape[w.name] = sw
			}
			sw.n++
			sw.sum += now.Sub(cg.created).Seconds()
		}
	}
	r.pending = still
}

// retire deletes the running gangs whose lifetime is over: their pods
// (no grace period: kwok runs them), claims and PodGroup.
func (r *churnRun) retire(now time.Time) {
	still := r.running[:0]
	for _, cg := range r.running {
		if now.Before(cg.until) {
			still = append(still, cg)
			continue
		}
		w, group := traceShape(cg.g), peerGroupName(cg.g)
		err := forEachParallel(r.b.Context(), benchWorkers, w.pods, func(ctx context.Context, j int) error {
			name := peerPodName(group, j)
			if err := r.admin.CoreV1().Pods(r.ns).Delete(ctx, name, *metav1.NewDeleteOptions(0)); err != nil {
				return fmt.Errorf("delete pod %s: %w", name, err)
			}
			return r.admin.ResourceV1().ResourceClaims(r.ns).Delete(ctx, name+"-gpu", metav1.DeleteOptions{})
		})
		itest.Must(r.b, "finish gang "+group, err)
		itest.Must(r.b, "delete podgroup "+group, r.admin.SchedulingV1beta1().PodGroups(r.ns).Delete(r.b.Context(), group, metav1.DeleteOptions{}))
		r.gpus -= w.pods * w.gpu
	}
	r.running = still
}

// admit creates the next gang.
func (r *churnRun) admit() {
	cg := &churnGang{g: r.next, created: time.Now()}
	r.next++
	itest.Must(r.b, "create gang", createPeerGang(r.b.Context(), r.admin, r.ns, peerGroupName(cg.g), r.s.schedulerName, traceShape(cg.g)))
	r.pending = append(r.pending, cg)
}

// report logs the mean create → bound per shape of the gangs bound in the
// window, and the gangs still waiting at its end with their age: the mean
// over all shapes leaves those out.
func (r *churnRun) report() {
	var shapes, waiting []string
	for _, w := range traceShapes {
		if sw := r.byShape[w.name]; sw != nil {
			shapes = append(shapes, fmt.Sprintf("%s %d × %.2fs", w.name, sw.n, sw.sum/float64(sw.n)))
		}
	}
	for _, cg := range r.pending {
		waiting = append(waiting, fmt.Sprintf("%s (%s) %.0fs", peerGroupName(cg.g), traceShape(cg.g).name, r.measureTo.Sub(cg.created).Seconds()))
	}
	r.b.Logf("%s: create → bound per shape: %s; still waiting at the end: %s", r.ns, strings.Join(shapes, ", "), strings.Join(waiting, ", "))
}
