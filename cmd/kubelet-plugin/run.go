package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/claims/node"
	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// runOptions are the flags of "kubelet-plugin run". Every flag has an
// environment variable twin (shown in its help), which sets its default.
type runOptions struct {
	discoverOptions
	kubeconfig     string
	pluginDir      string
	registrarDir   string
	cdiRoot        string
	stateDir       string
	podUID         string
	metricsAddress string
	bootIDPath     string
	healthInterval time.Duration
}

func (o *runOptions) flags(args []string) error {
	fs := newFlagSet("run", os.Stderr)
	str := func(p *string, name, env, def, help string) {
		fs.StringVar(p, name, envOr(env, def), fmt.Sprintf("%s (env %s)", help, env))
	}
	str(&o.node, "node", "NODE_NAME", "", "this node's name (required)")
	str(&o.kubeconfig, "kubeconfig", "KUBECONFIG", "", "kubeconfig file; empty: in-cluster config")
	str(&o.backend, "backend", "GPUFABRIC_BACKEND", "nvml", "hardware backend: nvml or mock")
	str(&o.mockFabric, "mock-fabric", "GPUFABRIC_MOCK_FABRIC", "", "fabric file (mock backend); re-read every health interval")
	str(&o.mockDir, "mock-dir", "GPUFABRIC_MOCK_DIR", "", "base directory for the mock node's fake sysfs and /dev; each process writes its own subdirectory (mock backend; default: the temp dir). In a container, use a host path mounted at the same path, so the runtime can bind-mount the fake device files")
	str(&o.sysfsRoot, "sysfs-root", "GPUFABRIC_SYSFS_ROOT", "/sys", "sysfs root (nvml backend)")
	str(&o.devRoot, "dev-root", "GPUFABRIC_DEV_ROOT", "/dev", "host device nodes as the plugin sees them (nvml backend)")
	str(&o.pluginDir, "plugin-data-dir", "GPUFABRIC_PLUGIN_DATA_DIR", "/var/lib/kubelet/plugins/"+topology.DriverName, "directory for the DRA socket")
	str(&o.registrarDir, "registrar-dir", "GPUFABRIC_REGISTRAR_DIR", "/var/lib/kubelet/plugins_registry", "kubelet plugin registration directory")
	str(&o.cdiRoot, "cdi-root", "GPUFABRIC_CDI_ROOT", "/var/run/cdi", "directory the container runtime reads CDI specs from")
	str(&o.stateDir, "state-dir", "GPUFABRIC_STATE_DIR", "/var/lib/gpufabric", "directory for the checkpoint of prepared claims")
	str(&o.podUID, "pod-uid", "POD_UID", "", "this plugin pod's UID; enables rolling updates (two plugin pods at once)")
	str(&o.metricsAddress, "metrics-address", "GPUFABRIC_METRICS_ADDRESS", "", "address for /metrics and /healthz, e.g. :8080; empty: off")
	str(&o.bootIDPath, "boot-id-path", "GPUFABRIC_BOOT_ID_PATH", node.DefaultBootIDPath, "file holding the boot id (reboots re-prepare claims)")
	interval, err := time.ParseDuration(envOr("GPUFABRIC_HEALTH_INTERVAL", "30s"))
	if err != nil {
		return fmt.Errorf("%w: GPUFABRIC_HEALTH_INTERVAL: %v", errUsage, err)
	}
	fs.DurationVar(&o.healthInterval, "health-interval", interval, "how often hardware is re-discovered and health re-published (env GPUFABRIC_HEALTH_INTERVAL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case o.node == "":
		return fmt.Errorf("%w: --node (or NODE_NAME) is required", errUsage)
	case o.healthInterval < time.Second:
		return fmt.Errorf("%w: --health-interval must be at least 1s, got %s", errUsage, o.healthInterval)
	case o.backend == "mock":
		// Per process: two instances during a rolling update must not
		// rewrite each other's fake tree.
		if o.mockDir != "" {
			if err := os.MkdirAll(o.mockDir, 0o755); err != nil {
				return fmt.Errorf("create mock dir: %w", err)
			}
		}
		dir, err := os.MkdirTemp(o.mockDir, "gpufabric-mock-"+o.node+"-")
		if err != nil {
			return fmt.Errorf("create mock dir: %w", err)
		}
		o.mockDir = dir
	}
	return nil
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// runPlugin runs the kubelet plugin until ctx is done: discovers the node,
// publishes its pool, serves the kubelet over the DRA and registration
// sockets, and re-discovers every health interval.
func runPlugin(ctx context.Context, args []string, _ io.Writer) error {
	var o runOptions
	if err := o.flags(args); err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("node", o.node)
	ctx, cancel := context.WithCancelCause(klog.NewContext(ctx, logger))
	defer cancel(nil)
	client, err := newClient(o.kubeconfig)
	if err != nil {
		return err
	}
	if o.backend == "mock" {
		defer os.RemoveAll(o.mockDir)
	}
	registry := newRegistry()
	if o.metricsAddress != "" {
		go serveMetrics(ctx, o.metricsAddress, registry)
	}
	p, err := newPlugin(ctx, &o, client, registry, func(err error) { cancel(err) })
	if err != nil {
		return err
	}
	defer p.helper.Stop()
	p.loop(ctx, o.healthInterval)
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func newClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create client: %w", err)
	}
	return client, nil
}

// helperOptions are the kubeletplugin options from the flags.
func (o *runOptions) helperOptions(client kubernetes.Interface) []kubeletplugin.Option {
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(topology.DriverName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(o.node),
		kubeletplugin.PluginDataDirectoryPath(o.pluginDir),
		kubeletplugin.RegistrarDirectoryPath(o.registrarDir),
		kubeletplugin.GRPCVerbosity(5),
	}
	if o.podUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(types.UID(o.podUID)))
	}
	return opts
}

func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	klog.FromContext(ctx).Info("Serving metrics", "address", addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		klog.FromContext(ctx).Error(err, "Metrics server stopped", "address", addr)
	}
}

func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// discover runs discovery once with a fresh backend (the mock backend
// re-reads its fabric file, so injected faults show up).
func (o *runOptions) discover(ctx context.Context) (*devices.Inventory, devices.Backend, error) {
	if o.backend == "mock" {
		// The mock writes a fresh fake tree at the same paths each time, so
		// device node paths in CDI specs stay valid.
		if err := os.RemoveAll(o.mockDir); err != nil {
			return nil, nil, fmt.Errorf("clear mock dir: %w", err)
		}
	}
	b, err := o.newBackend()
	if err != nil {
		return nil, nil, err
	}
	inv, err := devices.Discover(ctx, b, o.node)
	if err != nil {
		return nil, nil, fmt.Errorf("discover node %s: %w", o.node, err)
	}
	return inv, b, nil
}

// channelResolver checks channels against the node's own NVLink domain.
func channelResolver(inv *devices.Inventory, b devices.Backend) claims.ChannelResolver {
	return claims.FabricChannelResolver{LocalDomainID: localDomain(inv), DevRoot: hostRoot(b.DevRoot())}
}

// hostRoot is the root whose dev/ holds the device nodes.
func hostRoot(devRoot string) string {
	if devRoot == "/dev" {
		return "/"
	}
	return filepath.Dir(devRoot)
}
