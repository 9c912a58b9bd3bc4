package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/devices/mock"
	"github.com/gpufabric/gpufabric/pkg/topology"
	"github.com/gpufabric/gpufabric/test/integration/framework"
)

const (
	rackLabel = "topology.gpufabric.dev/rack"
	leafLabel = "topology.gpufabric.dev/ib-leaf"
)

// demo is one run: the control plane, the fabric and the admin client.
type demo struct {
	cp     *framework.ControlPlane
	fabric *mock.Fabric
	opts   options
	client kubernetes.Interface
	nodes  []*corev1.Node
	// workloads: the JobSet and LeaderWorkerSet were submitted.
	workloads bool
}

func newDemo(ctx context.Context, cp *framework.ControlPlane, fabric *mock.Fabric, o options) (*demo, error) {
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		return nil, fmt.Errorf("build client: %w", err)
	}
	all, err := fabric.DiscoverAll(ctx, filepath.Join(cp.Dir(), "discover"))
	if err != nil {
		return nil, fmt.Errorf("discover fabric: %w", err)
	}
	d := &demo{cp: cp, fabric: fabric, opts: o, client: client}
	for _, nr := range all {
		d.nodes = append(d.nodes, nr.Node)
	}
	return d, nil
}

// bringUp creates the nodes (kwok runs them), starts one plugin per node and
// the scheduler, and waits until every node's pool and the fabric-domain
// pools are published.
func (d *demo) bringUp(ctx context.Context, out io.Writer) error {
	step(out, "Creating %d mock GPU nodes from %s", len(d.nodes), d.opts.fabric)
	for _, n := range d.nodes {
		n = n.DeepCopy()
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[framework.KwokNodeAnnotation] = "fake"
		if _, err := d.client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
	}
	step(out, "Starting %d kubelet-plugin processes (mock NVML) and gpufabric-scheduler", len(d.nodes))
	if err := d.startPlugins(ctx); err != nil {
		return err
	}
	if err := d.startScheduler(ctx); err != nil {
		return err
	}
	return d.waitPublished(ctx)
}

func (d *demo) identity(ctx context.Context, user, rulesFile string) (string, error) {
	rules, err := framework.LoadRules(rulesFile)
	if err != nil {
		return "", err
	}
	if err := framework.GrantRules(ctx, d.client, user, rules); err != nil {
		return "", err
	}
	return d.cp.WriteUserKubeconfig(user)
}

func (d *demo) startPlugins(ctx context.Context) error {
	bin, err := d.opts.binary("kubelet-plugin")
	if err != nil {
		return err
	}
	kubeconfig, err := d.identity(ctx, "gpufabric-kubelet-plugin", framework.PluginRulesFile)
	if err != nil {
		return err
	}
	fabric, err := filepath.Abs(d.opts.fabric)
	if err != nil {
		return err
	}
	for _, n := range d.nodes {
		dir := d.nodeDir(n.Name)
		err := d.cp.StartProcess("plugin-"+n.Name, bin, "run",
			"--node="+n.Name, "--kubeconfig="+kubeconfig, "--backend=mock", "--mock-fabric="+fabric,
			"--plugin-data-dir="+filepath.Join(dir, "plugin"), "--registrar-dir="+filepath.Join(dir, "registry"),
			"--cdi-root="+filepath.Join(dir, "cdi"), "--state-dir="+filepath.Join(dir, "state"),
			"--boot-id-path="+filepath.Join(dir, "boot_id"), "--health-interval=30s")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "boot_id"), []byte("demo-boot\n"), 0o600); err != nil {
			return fmt.Errorf("write boot id: %w", err)
		}
	}
	return nil
}

// nodeDir holds one node's plugin directories (what /var/lib/kubelet and
// /var/run/cdi are on a real node).
func (d *demo) nodeDir(node string) string {
	dir := filepath.Join(d.cp.Dir(), "nodes", node)
	_ = os.MkdirAll(dir, 0o700)
	return dir
}

// schedulerNamespace is the scheduler's own namespace in the demo (its
// Lease and commit records), as the chart's release namespace.
const schedulerNamespace = "gpufabric-system"

func (d *demo) startScheduler(ctx context.Context) error {
	bin, err := d.opts.binary("scheduler")
	if err != nil {
		return err
	}
	const user = "gpufabric-scheduler"
	if err := framework.GrantSchedulerRules(ctx, d.client, user, schedulerNamespace); err != nil {
		return err
	}
	kubeconfig, err := d.cp.WriteUserKubeconfig(user)
	if err != nil {
		return err
	}
	return d.cp.StartProcess("scheduler", bin, "--kubeconfig="+kubeconfig,
		"--topology-levels="+rackLabel+","+leafLabel, "--leader-elect-namespace="+schedulerNamespace,
		"--commit-record-namespace="+schedulerNamespace, "--metrics-address=127.0.0.1:0", "--composite-pod-groups=true")
}

func (d *demo) waitPublished(ctx context.Context) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := d.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		nodes, pools := map[string]bool{}, map[string]bool{}
		var local []*resourceapi.ResourceSlice
		for i := range list.Items {
			s := &list.Items[i]
			switch {
			case s.Spec.Driver != topology.DriverName:
			case s.Spec.NodeName != nil:
				nodes[*s.Spec.NodeName] = true
				local = append(local, s)
			default:
				pools[s.Spec.Pool.Name] = true
			}
		}
		// The pools the publisher makes of these slices (domains with an
		// untainted GPU); any name, any channel count.
		want := topology.FabricDomainPools(local, func(string) string { return "" }, 1)
		missing := 0
		for _, p := range want {
			if !pools[p.Name] {
				missing++
			}
		}
		last = fmt.Sprintf("%d of %d nodes published, %d of %d fabric-domain pools missing", len(nodes), len(d.nodes), missing, len(want))
		return len(nodes) == len(d.nodes) && missing == 0, nil
	})
	if err != nil {
		return fmt.Errorf("wait for every node's pool and the fabric-domain pools (%s): %w", last, err)
	}
	return nil
}

// withLogs adds the tail of the scheduler's log to an error (the state
// dir with all logs is removed on exit).
func (d *demo) withLogs(err error) error {
	data, _ := os.ReadFile(d.cp.ProcessLog("scheduler"))
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return fmt.Errorf("%w\nscheduler log (last lines):\n%s", err, strings.Join(lines, "\n"))
}
