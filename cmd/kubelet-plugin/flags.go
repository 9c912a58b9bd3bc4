package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/claims/node"
	"github.com/gpufabric/gpufabric/pkg/devices"
	"github.com/gpufabric/gpufabric/pkg/devices/fabrichealth"
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
	imex           imexOptions
	health         healthOptions
	mig            string
	cdi            cdiOptions
	serving        servingOptions
	fabric         fabricOptions
}

// fabricOptions say when link error counters taint a device.
type fabricOptions struct {
	threshold int64
	window    time.Duration
}

// defaultFabricErrorThreshold: OFED's ibcheckerrs flags a port at 10
// symbol errors, link error recoveries, link downs or receive errors
// (its predefined thresholds); the same 10, within the window, for the
// sum of a device's counters (docs/design/health.md, "Sick fabric").
const defaultFabricErrorThreshold = 10

func (f fabricOptions) config() fabrichealth.Config {
	return fabrichealth.Config{Window: f.window, Threshold: f.threshold}
}

// healthOptions say which GPU events taint how.
type healthOptions struct {
	fatalXIDs, ignoredXIDs string
	fatalEffect            string
	policy                 devices.HealthPolicy
}

// imexOptions say who hands out IMEX channels and how the IMEX daemon is
// asked whether it is ready.
type imexOptions struct {
	// channels is "managed" (this plugin: channel n of a multi-node NVLink
	// domain is IMEX channel n) or "off" (another component, e.g. NVIDIA's
	// ComputeDomain).
	channels     string
	ctl          string
	readyTimeout time.Duration
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
	str(&o.metricsAddress, "metrics-address", "GPUFABRIC_METRICS_ADDRESS", "", "address of the HTTPS port of /metrics and the health endpoints /livez, /readyz, /healthz, e.g. :8080; empty: off")
	o.serving.bind(fs)
	str(&o.bootIDPath, "boot-id-path", "GPUFABRIC_BOOT_ID_PATH", node.DefaultBootIDPath, "file holding the boot id (reboots re-prepare claims)")
	str(&o.procRoot, "proc-root", "GPUFABRIC_PROC_ROOT", "/proc", "procfs root (nvml backend): IMEX channel major and count")
	str(&o.imex.channels, "imex-channels", "GPUFABRIC_IMEX_CHANNELS", "managed", "managed: a multi-node NVLink channel gets its IMEX channel and waits for the IMEX daemon; off: IMEX is another component's (e.g. NVIDIA ComputeDomain)")
	str(&o.imex.ctl, "imex-ctl", "GPUFABRIC_IMEX_CTL", "nvidia-imex-ctl -c /etc/nvidia-imex/config.cfg -q", "command that prints READY when the node's IMEX daemon serves channels (nvml backend)")
	str(&o.mig, "mig", "GPUFABRIC_MIG", string(devices.MIGPartitions), "MIG-enabled GPUs: partitions (every profile and placement, sharing the GPU's memory-slice counters; made at prepare) or exclude (not published, with a Node event)")
	str(&o.cdi.driver, "cdi-driver", "GPUFABRIC_CDI_DRIVER", "nvcdi", "nvcdi: a GPU's CDI spec carries the driver's libraries, binaries and hooks (any CDI runtime); off: device nodes and variables only (nvidia-container-runtime injects the driver)")
	str(&o.cdi.driverRoot, "driver-root", "GPUFABRIC_DRIVER_ROOT", "/", "root of the NVIDIA driver installation as the plugin sees it (nvml backend)")
	str(&o.cdi.hostDriverRoot, "host-driver-root", "GPUFABRIC_HOST_DRIVER_ROOT", "", "the same root as the host sees it; default --driver-root")
	str(&o.cdi.hookPath, "nvidia-cdi-hook", "GPUFABRIC_NVIDIA_CDI_HOOK", "/usr/bin/nvidia-cdi-hook", "host path of nvidia-cdi-hook, which CDI specs run (symlinks, ldcache)")
	str(&o.cdi.hookSource, "install-nvidia-cdi-hook", "GPUFABRIC_INSTALL_NVIDIA_CDI_HOOK", "", "copy this nvidia-cdi-hook (e.g. the image's) to --nvidia-cdi-hook at start; empty: the host has one")
	def := devices.DefaultHealthPolicy()
	str(&o.health.fatalXIDs, "fatal-xids", "GPUFABRIC_FATAL_XIDS", devices.FormatXIDs(def.FatalXIDs), "Xids that break the running job: their taint has --fatal-taint-effect")
	str(&o.health.ignoredXIDs, "ignored-xids", "GPUFABRIC_IGNORED_XIDS", devices.FormatXIDs(def.IgnoredXIDs), "application Xids that leave the GPU healthy (no taint); any other Xid taints NoSchedule")
	str(&o.health.fatalEffect, "fatal-taint-effect", "GPUFABRIC_FATAL_TAINT_EFFECT", string(def.FatalEffect), "effect of fatal Xid, double-bit ECC and lost-GPU taints: NoExecute (running pods are evicted) or NoSchedule")
	durations := []struct {
		p              *time.Duration
		name, env, def string
		help           string
	}{
		{&o.healthInterval, "health-interval", "GPUFABRIC_HEALTH_INTERVAL", "30s", "how often hardware is re-discovered and health re-published"},
		{&o.fabric.window, "fabric-error-window", "GPUFABRIC_FABRIC_ERROR_WINDOW", "10m", "how far back link error counters' increases count toward fabricErrors and --fabric-error-threshold (1s..24h; shorter than --health-interval counts one interval's increase)"},
		{&o.imex.readyTimeout, "imex-ready-timeout", "GPUFABRIC_IMEX_READY_TIMEOUT", claims.DefaultIMEXReadyTimeout.String(), "how long a prepare waits for the IMEX daemon before it fails"},
	}
	for _, d := range durations {
		v, err := time.ParseDuration(envOr(d.env, d.def))
		if err != nil {
			return fmt.Errorf("%w: %s: %v", errUsage, d.env, err)
		}
		fs.DurationVar(d.p, d.name, v, fmt.Sprintf("%s (env %s)", d.help, d.env))
	}
	threshold, err := strconv.ParseInt(envOr("GPUFABRIC_FABRIC_ERROR_THRESHOLD", strconv.Itoa(defaultFabricErrorThreshold)), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: GPUFABRIC_FABRIC_ERROR_THRESHOLD: %v", errUsage, err)
	}
	fs.Int64Var(&o.fabric.threshold, "fabric-error-threshold", threshold,
		"taint a GPU or NIC gpufabric.dev/fabric-errors (NoSchedule) once its link error counters (NVLink replay, recovery, CRC; IB link_downed, symbol_error, port_rcv_errors, link_error_recovery) rose this much within --fabric-error-window; 0: never (env GPUFABRIC_FABRIC_ERROR_THRESHOLD)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.imexCtl = strings.Fields(o.imex.ctl)
	if err := o.health.parse(); err != nil {
		return err
	}
	if err := o.serving.validate(o.metricsAddress); err != nil {
		return err
	}
	return o.validate()
}

func (h *healthOptions) parse() error {
	var err error
	if h.policy.FatalXIDs, err = devices.ParseXIDs(h.fatalXIDs); err != nil {
		return fmt.Errorf("%w: --fatal-xids: %v", errUsage, err)
	}
	if h.policy.IgnoredXIDs, err = devices.ParseXIDs(h.ignoredXIDs); err != nil {
		return fmt.Errorf("%w: --ignored-xids: %v", errUsage, err)
	}
	switch e := resourceapi.DeviceTaintEffect(h.fatalEffect); e {
	case resourceapi.DeviceTaintEffectNoExecute, resourceapi.DeviceTaintEffectNoSchedule:
		h.policy.FatalEffect = e
	default:
		return fmt.Errorf("%w: --fatal-taint-effect must be NoExecute or NoSchedule, got %q", errUsage, h.fatalEffect)
	}
	for x := range h.policy.FatalXIDs {
		if h.policy.IgnoredXIDs[x] {
			return fmt.Errorf("%w: xid %d is both fatal and ignored", errUsage, x)
		}
	}
	return nil
}

// validate checks the flags and makes the mock backend's directory.
func (o *runOptions) validate() error {
	switch {
	case o.node == "":
		return fmt.Errorf("%w: --node (or NODE_NAME) is required", errUsage)
	case o.healthInterval < time.Second:
		return fmt.Errorf("%w: --health-interval must be at least 1s, got %s", errUsage, o.healthInterval)
	case o.mig != string(devices.MIGPartitions) && o.mig != string(devices.MIGExclude):
		return fmt.Errorf("%w: --mig must be partitions or exclude, got %q", errUsage, o.mig)
	case o.cdi.driver != "nvcdi" && o.cdi.driver != "off":
		return fmt.Errorf("%w: --cdi-driver must be nvcdi or off, got %q", errUsage, o.cdi.driver)
	case o.cdi.driver == "nvcdi" && !filepath.IsAbs(o.cdi.hookPath):
		return fmt.Errorf("%w: --nvidia-cdi-hook must be an absolute host path, got %q", errUsage, o.cdi.hookPath)
	case o.imex.channels != "managed" && o.imex.channels != "off":
		return fmt.Errorf("%w: --imex-channels must be managed or off, got %q", errUsage, o.imex.channels)
	case o.fabric.threshold < 0:
		return fmt.Errorf("%w: --fabric-error-threshold must be 0 (off) or more, got %d", errUsage, o.fabric.threshold)
	case o.fabric.window < time.Second || o.fabric.window > 24*time.Hour:
		return fmt.Errorf("%w: --fabric-error-window must be 1s..24h, got %s", errUsage, o.fabric.window)
	case o.imex.readyTimeout <= 0:
		return fmt.Errorf("%w: --imex-ready-timeout must be positive, got %s", errUsage, o.imex.readyTimeout)
	case len(strings.Fields(o.imex.ctl)) == 0 && o.imex.channels == "managed" && o.backend == "nvml":
		return fmt.Errorf("%w: --imex-ctl must name a command with --imex-channels=managed", errUsage)
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
