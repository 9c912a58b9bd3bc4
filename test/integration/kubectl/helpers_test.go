package kubectl

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/yaml"

	"github.com/gpufabric/gpufabric/pkg/gang/scheduler"
	"github.com/gpufabric/gpufabric/pkg/inspect"
	"github.com/gpufabric/gpufabric/pkg/inspect/cli"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

// recordNamespace is the scheduler's own namespace (commit records).
const recordNamespace = "gpufabric-system"

// startScheduler runs gpufabric-scheduler in the test process with
// exactly the chart's RBAC rules, and returns the function that stops it
// (also called at the test's end).
func startScheduler(t *testing.T, cp *framework.ControlPlane, cfg scheduler.Config) func() {
	t.Helper()
	const user = "gpufabric-scheduler"
	must(t, "grant scheduler rules", framework.GrantSchedulerRules(t.Context(), cp.AdminClient(t), user, recordNamespace))
	rc, err := cp.UserConfig(user)
	must(t, "scheduler config", err)
	cfg.Client, err = kubernetes.NewForConfig(rc)
	must(t, "scheduler client", err)
	cfg.RecordNamespace = recordNamespace
	cfg.InitialBackoff, cfg.MaxBackoff = 200*time.Millisecond, 2*time.Second
	s, err := scheduler.New(cfg)
	must(t, "create scheduler", err)
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logger))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("scheduler: %v", err)
		}
	}()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	return stop
}

// poll waits until cond returns nil and fails the test with its last error.
func poll(t *testing.T, what string, timeout time.Duration, cond func(context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := cond(ctx); err != nil {
			if ctx.Err() == nil {
				last = err
			}
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last: %v)", what, err, last)
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// runPlugin runs the plugin in-process with the admin kubeconfig, no
// colours and the test's topology levels, and returns its output.
func runPlugin(t *testing.T, cp *framework.ControlPlane, args ...string) string {
	t.Helper()
	out, errOut, err := runPluginErr(t, cp, args...)
	if err != nil {
		t.Fatalf("kubectl gpufabric %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// runPluginErr is runPlugin for a command that may fail: stdout, stderr
// and the error.
func runPluginErr(t *testing.T, cp *framework.ControlPlane, args ...string) (string, string, error) {
	t.Helper()
	return runPluginAs(t, cp.KubeconfigPath(), args...)
}

// runPluginAs is runPluginErr with another identity's kubeconfig.
func runPluginAs(t *testing.T, kubeconfig string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := cli.NewCommand(cli.Config{Streams: genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, Version: "test"})
	cmd.SetArgs(append([]string{"--kubeconfig=" + kubeconfig, "--color=never",
		"--topology-levels=" + strings.Join(levels, ",")}, args...))
	_, ctx := ktesting.NewTestContext(t)
	err := cmd.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// eventRow matches a row of explain's events table: age, type, reason,
// count.
var eventRow = regexp.MustCompile(`(?m)^  (\S+)( +)(Normal|Warning)( +)(\S+)( +)(\d+)( +)`)

// mask replaces what changes from run to run: the events' ages and counts
// (a refused gang may be tried again before the scheduler stops). Both
// columns are narrower than their headers, so masking keeps the alignment.
func mask(s string) string {
	s = eventRow.ReplaceAllStringFunc(s, func(m string) string {
		g := eventRow.FindStringSubmatch(m)
		return "  " + padTo("<age>", len(g[1])+len(g[2])) + g[3] + g[4] + g[5] + g[6] + padTo("N", len(g[7])+len(g[8]))
	})
	s = waitingRow.ReplaceAllStringFunc(s, func(m string) string {
		g := waitingRow.FindStringSubmatch(m)
		return g[1] + padTo("<age>", len(g[2])+len(g[3]))
	})
	s = viewAge.ReplaceAllString(s, "counted <age> ago (<time>)")
	return queueAge.ReplaceAllString(s, "${1}<age>)")
}

// waitingRow matches a row of status's waiting PodGroups up to the age
// (QUEUE, PODGROUP, PRIORITY, WAITING; the age is narrower than WAITING);
// queueAge the age in explain's Queue line.
var (
	waitingRow = regexp.MustCompile(`(?m)^(  \d+ +\S+/\S+ +-?\d+ +)(\S+)( +)`)
	queueAge   = regexp.MustCompile(`(?m)^(Queue: .*, waiting )\S+\)`)
	viewAge    = regexp.MustCompile(`counted \S+ ago \(\S+\)`)
)

func padTo(s string, n int) string {
	return s + strings.Repeat(" ", max(1, n-len(s)))
}

func compareGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		must(t, "write golden", os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	must(t, "read golden (-update creates it)", err)
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; -update rewrites it):\n%s", path, diff)
	}
}

// checkStatusJSON decodes `status -o json` and checks its numbers.
func checkStatusJSON(t *testing.T, out string) {
	t.Helper()
	var r inspect.StatusReport
	must(t, "decode status json", json.Unmarshal([]byte(out), &r))
	var keys []string
	for _, l := range r.Levels {
		keys = append(keys, l.Key)
	}
	if want := []string{topology.TopologyKeyNVLinkDomain, rackKey, leafKey}; !cmp.Equal(keys, want) {
		t.Errorf("levels %v, want %v", keys, want)
	}
	g := r.Cluster.GPUs
	if g.Total != 16 || g.Used != 9 || g.Used+g.Tainted+g.Free != g.Total || r.Cluster.Channels != (inspect.ChannelCounts{Total: 8, Used: 1}) {
		t.Errorf("cluster GPUs %+v, channels %+v; want 16 GPUs, 9 used, 1 of 8 channels", g, r.Cluster.Channels)
	}
	train := inspect.GangUse{GangRef: inspect.GangRef{Kind: inspect.KindPodGroup, Namespace: "team-a", Name: "train", Job: "llm-train"}, GPUs: 8, Channels: 1}
	if gangs := r.Levels[0].Domains[0].Gangs; len(gangs) != 1 || gangs[0] != train {
		t.Errorf("dom-a gangs %+v, want %+v", gangs, train)
	}
	if len(r.Waiting) != 1 || r.Waiting[0].Name != "big" || r.Waiting[0].Reason != "Unschedulable" ||
		r.Waiting[0].Position != 1 || r.Waiting[0].Priority != 0 || r.Waiting[0].Created.IsZero() {
		t.Errorf("waiting %+v, want big, Unschedulable, first in the queue, priority 0, with its creation time", r.Waiting)
	}
}

// checkNodesYAML decodes `nodes -o yaml` strictly and checks the tainted
// device.
func checkNodesYAML(t *testing.T, out string) {
	t.Helper()
	var r inspect.NodesReport
	must(t, "decode nodes yaml", yaml.UnmarshalStrict([]byte(out), &r))
	want := []inspect.DeviceTaint{{Key: topology.TaintNVLinkDegraded, Value: "2-of-18-nvlinks-down", Effect: "NoSchedule", Devices: []string{"gpu-3"}}}
	if len(r.Nodes) != 4 || !cmp.Equal(r.Nodes[3].DeviceTaints, want) {
		t.Errorf("nodes %+v, want 4 with b-1's tainted gpu-3", r.Nodes)
	}
}
