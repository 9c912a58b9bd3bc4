package peer

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// peerProfiler looks inside gpufabric-scheduler during BenchmarkPeer when
// GPUFABRIC_PEER_PROFILE_DIR names a folder: the scheduler then runs with
// --profiling, its metrics on a loopback port and -v=3 (a line per
// attempt), and for each of its runs the benchmark writes into that
// folder a CPU profile of the run's window (peerCPU) and logs the gang's
// timeline (gangTimeline) and the CPU every control-plane process used
// between the last create and all bound. Off, BenchmarkPeer runs the
// scheduler as before (no metrics port, -v=0).
type peerProfiler struct {
	dir string
	// token may get /debug/pprof/* on the scheduler's metrics port.
	token string
	// addrs and logs: each gpufabric scheduler process's metrics address
	// and log file (copied into dir at the end); procs: the processes
	// whose CPU a run reports.
	addrs, logs map[string]string
	procs       []string
}

// newPeerProfiler returns nil when GPUFABRIC_PEER_PROFILE_DIR is unset.
func newPeerProfiler(b *testing.B, cp *framework.ControlPlane) *peerProfiler {
	dir := os.Getenv("GPUFABRIC_PEER_PROFILE_DIR")
	if dir == "" {
		return nil
	}
	abs, err := filepath.Abs(dir)
	itest.Must(b, "profile dir", err)
	itest.Must(b, "create profile dir", os.MkdirAll(abs, 0o755))
	p := &peerProfiler{dir: abs, token: itest.EndpointToken(b, cp.AdminClient(b), "peer-profiler", "/debug/pprof/*"), addrs: map[string]string{}, logs: map[string]string{},
		procs: []string{"kube-apiserver", "etcd", "kwok", "kube-controller-manager"}}
	if peerSelected(b, peerSchedulers[1]) {
		p.procs = append(p.procs, peerSchedulers[1].process)
	}
	b.Cleanup(func() {
		for process, log := range p.logs {
			data, err := os.ReadFile(log)
			if err == nil {
				err = os.WriteFile(filepath.Join(p.dir, process+".log"), data, 0o644)
			}
			if err != nil {
				b.Logf("keeping the log of %s: %v", process, err)
			}
		}
	})
	b.Logf("profiling gpufabric-scheduler into %s", abs)
	return p
}

// schedulerArgs are the metrics and log flags of the gpufabric scheduler
// process to be started as process: profiled, on a free loopback port.
func (p *peerProfiler) schedulerArgs(b *testing.B, cp *framework.ControlPlane, process string) []string {
	if p == nil {
		return []string{"--metrics-address="}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	itest.Must(b, "free port", err)
	addr := l.Addr().String()
	itest.Must(b, "free port", l.Close())
	p.addrs[process], p.logs[process] = addr, cp.ProcessLog(process)
	p.procs = append(p.procs, process)
	b.Logf("%s: pprof on https://%s/debug/pprof/", process, addr)
	return []string{"--metrics-address=" + addr, "--profiling", "-v=3"}
}

// peerCPU captures CPU profiles of the scheduler back to back, one second
// each (the handler takes whole seconds and cannot be stopped early
// without losing the profile), from start until stop; the last one ends
// at most a second after stop.
type peerCPU struct {
	stop   chan struct{}
	done   chan struct{}
	chunks [][]byte
	err    error
}

func (p *peerProfiler) startCPU(ctx context.Context, process string) *peerCPU {
	c := &peerCPU{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			default:
			}
			data, err := p.get(ctx, p.addrs[process], "/debug/pprof/profile?seconds=1")
			if err != nil {
				c.err = err
				return
			}
			c.chunks = append(c.chunks, data)
		}
	}()
	return c
}

// finish stops the capture and writes <base>-cpu-<k>s.pb.gz per second
// and their merge, <base>-cpu.pb.gz (go tool pprof -proto).
func (c *peerCPU) finish(b *testing.B, base string) {
	close(c.stop)
	<-c.done
	if c.err != nil {
		b.Logf("CPU profile %s: %v", base, c.err)
		return
	}
	var files []string
	for k, data := range c.chunks {
		f := fmt.Sprintf("%s-cpu-%02ds.pb.gz", base, k)
		itest.Must(b, "write profile", os.WriteFile(f, data, 0o644))
		files = append(files, f)
	}
	if len(files) == 0 {
		return
	}
	cmd := exec.CommandContext(b.Context(), "go", append([]string{"tool", "pprof", "-proto"}, files...)...)
	out, err := cmd.Output()
	if err == nil {
		err = os.WriteFile(base+"-cpu.pb.gz", out, 0o644)
	}
	if err != nil {
		b.Logf("merging %d CPU profiles of %s: %v", len(files), base, err)
	}
}

func (p *peerProfiler) get(ctx context.Context, addr, path string) ([]byte, error) {
	code, data, err := itest.EndpointGet(ctx, addr, path, p.token)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("status %d: %s", code, data)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", path, err)
	}
	return data, nil
}

// cpuNow reads the CPU time so far of every process the profiler reports.
func (p *peerProfiler) cpuNow(b *testing.B, cp *framework.ControlPlane) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, name := range p.procs {
		st, err := cp.ProcessStats(name)
		itest.Must(b, "process stats", err)
		out[name] = st.CPU
	}
	return out
}

// cpuSince describes the CPU each process used since before, over wall
// seconds: "kube-apiserver 1.23s (0.98 cores), …", busiest first, and the
// total in cores (the machine has runtime.NumCPU of them).
func cpuSince(before, after map[string]time.Duration, wall float64) string {
	names := make([]string, 0, len(after))
	var total time.Duration
	for n := range after {
		names = append(names, n)
		total += after[n] - before[n]
	}
	sort.Slice(names, func(i, j int) bool { return after[names[i]]-before[names[i]] > after[names[j]]-before[names[j]] })
	parts := []string{fmt.Sprintf("all %.2fs (%.2f cores)", total.Seconds(), total.Seconds()/wall)}
	for _, n := range names {
		if d := after[n] - before[n]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2fs", n, d.Seconds()))
		}
	}
	return strings.Join(parts, ", ")
}

// peerProbe is what one profiled run records. Every method is a no-op on
// nil (profiling off).
type peerProbe struct {
	p          *peerProfiler
	cp         *framework.ControlPlane
	s          peerScheduler
	w          peerWorkload
	ns         string
	cpu        *peerCPU
	start      time.Time
	created    time.Time
	cpuCreated map[string]time.Duration
}

// begin starts a profiled run of w for s in namespace ns: a CPU profile
// when s is a gpufabric scheduler. Call it right before the first create.
func (p *peerProfiler) begin(b *testing.B, cp *framework.ControlPlane, s peerScheduler, w peerWorkload, ns string) *peerProbe {
	if p == nil {
		return nil
	}
	r := &peerProbe{p: p, cp: cp, s: s, w: w, ns: ns, start: time.Now()}
	if _, ok := p.addrs[s.process]; ok {
		r.cpu = p.startCPU(b.Context(), s.process)
	}
	return r
}

// onCreated marks the last create returned.
func (r *peerProbe) onCreated(b *testing.B) {
	if r == nil {
		return
	}
	r.created, r.cpuCreated = time.Now(), r.p.cpuNow(b, r.cp)
}

// onBound ends the run (all bound at end, or the timeout) and logs what
// it found: the processes' CPU from the last create to end and, for
// a gpufabric scheduler, the gang's timeline; its CPU profile goes to
// <dir>/<workload>-<ns>-cpu.pb.gz.
func (r *peerProbe) onBound(b *testing.B, counts podCounts, end time.Time) {
	if r == nil {
		return
	}
	cpu := cpuSince(r.cpuCreated, r.p.cpuNow(b, r.cp), end.Sub(r.created).Seconds())
	load, err := os.ReadFile("/proc/loadavg")
	itest.Must(b, "read load average", err)
	b.Logf("%s, %s, %s: CPU from the last create to all bound (%.2fs): %s; load average %s", r.ns, r.w.name, r.s.process,
		end.Sub(r.created).Seconds(), cpu, strings.Join(strings.Fields(string(load))[:3], " "))
	if r.cpu == nil {
		return
	}
	r.cpu.finish(b, filepath.Join(r.p.dir, r.w.name+"-"+r.ns))
	if r.w.gangs != 1 {
		return
	}
	kind := "pg:"
	if r.w.tree != nil {
		kind = "cpg:" // a tree is keyed by its root
	}
	lines, err := readGangLog(r.p.logs[r.s.process], kind+r.ns+"/"+peerGroupName(0), r.start.Year())
	if err != nil {
		b.Logf("timeline of %s: %v", r.ns, err)
		return
	}
	b.Logf("%s, %s timeline, %s", r.ns, r.w.name, timelineOf(lines, r.created).describe(r.start, r.created, counts))
}
