package peer

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// baselineScheduler is a second gpufabric-scheduler binary
// (GPUFABRIC_PEER_BASELINE_BIN, e.g. built from the commit before a
// change) that BenchmarkPeer runs beside the current one, so that a
// change is measured against its baseline in the same run, on the same
// control plane. Both serve the same schedulerName, so only one of them
// runs at a time: the other is stopped (SIGSTOP).
var baselineScheduler = peerScheduler{process: "gpufabric-baseline", schedulerName: topology.SchedulerName, label: "baseline"}

// peerLineup is what BenchmarkPeer runs: gpufabric-scheduler,
// kube-scheduler and, when given, the baseline binary.
type peerLineup struct {
	cp       *framework.ControlPlane
	baseline bool
	// active is the gpufabric scheduler process that runs now.
	active string
}

// startBaseline starts GPUFABRIC_PEER_BASELINE_BIN (when set) as
// baselineScheduler with args, waits until it schedules and stops it.
func startBaseline(b *testing.B, cp *framework.ControlPlane, prof *peerProfiler, args []string) *peerLineup {
	l := &peerLineup{cp: cp, active: peerSchedulers[0].process}
	bin := os.Getenv("GPUFABRIC_PEER_BASELINE_BIN")
	if bin == "" || !peerSelected(b, baselineScheduler) {
		return l
	}
	if !peerSelected(b, peerSchedulers[0]) {
		b.Fatalf("GPUFABRIC_PEER_BASELINE_BIN runs beside gpufabric-scheduler: GPUFABRIC_PEER_SCHEDULERS must name gpufabric too")
	}
	args = append(args, prof.schedulerArgs(b, cp, baselineScheduler.process)...)
	itest.Must(b, "start baseline", cp.StartProcess(baselineScheduler.process, bin, args...))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		log, err := os.ReadFile(cp.ProcessLog(baselineScheduler.process))
		itest.Must(b, "read baseline log", err)
		if strings.Contains(string(log), `"Scheduling"`) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("baseline %s not scheduling after 2 minutes:\n%s", bin, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
	itest.Must(b, "stop baseline", cp.Signal(baselineScheduler.process, syscall.SIGSTOP))
	// A stopped process would only take SIGTERM at the end after its grace.
	b.Cleanup(func() { _ = cp.Signal(baselineScheduler.process, syscall.SIGCONT) })
	l.baseline = true
	b.Logf("baseline: %s (%s), stopped while gpufabric-scheduler runs", bin, baselineScheduler.process)
	return l
}

// schedulers are the schedulers of the report, those
// GPUFABRIC_PEER_SCHEDULERS names.
func (l *peerLineup) schedulers() []peerScheduler {
	all := peerSchedulers
	if l.baseline {
		all = []peerScheduler{peerSchedulers[0], baselineScheduler, peerSchedulers[1]}
	}
	var out []peerScheduler
	for _, s := range all {
		if peerSelected(nil, s) {
			out = append(out, s)
		}
	}
	return out
}

// peerSelected reports whether GPUFABRIC_PEER_SCHEDULERS (a comma list of
// gpufabric, kube, baseline; unset: all) names s; with b, it fails b on a
// name it does not know.
func peerSelected(b *testing.B, s peerScheduler) bool {
	v := strings.TrimSpace(os.Getenv("GPUFABRIC_PEER_SCHEDULERS"))
	if v == "" {
		return true
	}
	picked := false
	for _, n := range strings.Split(v, ",") {
		n = strings.TrimSpace(n)
		if b != nil && n != "gpufabric" && n != "kube" && n != "baseline" {
			b.Fatalf("GPUFABRIC_PEER_SCHEDULERS: unknown scheduler %q (have gpufabric, kube, baseline)", n)
		}
		picked = picked || n == s.label
	}
	return picked
}

// order is the run order of iteration i: it alternates, and the baseline
// runs right next to gpufabric-scheduler (after it, then before it), so
// that both see the same machine.
func (l *peerLineup) order(i int) []peerScheduler {
	s := l.schedulers()
	if i%2 == 1 {
		out := make([]peerScheduler, len(s))
		for j := range s {
			out[j] = s[len(s)-1-j]
		}
		return out
	}
	return s
}

// activate makes s's gpufabric process the one that runs (the other one
// stopped) and waits until it is quiet (it may catch up with what it
// missed while stopped). kube-scheduler needs nothing.
func (l *peerLineup) activate(b *testing.B, s peerScheduler) {
	if !l.baseline || s.schedulerName != topology.SchedulerName || s.process == l.active {
		return
	}
	itest.Must(b, "stop "+l.active, l.cp.Signal(l.active, syscall.SIGSTOP))
	itest.Must(b, "continue "+s.process, l.cp.Signal(s.process, syscall.SIGCONT))
	l.active = s.process
	start := time.Now()
	last, err := l.cp.ProcessStats(s.process)
	itest.Must(b, "process stats", err)
	for quiet := 0; quiet < 2 && time.Since(start) < time.Minute; {
		time.Sleep(500 * time.Millisecond)
		now, err := l.cp.ProcessStats(s.process)
		itest.Must(b, "process stats", err)
		if now.CPU-last.CPU <= 20*time.Millisecond {
			quiet++
		} else {
			quiet = 0
		}
		last = now
	}
	b.Logf("%s continued, quiet after %.1fs", s.process, time.Since(start).Seconds())
}
