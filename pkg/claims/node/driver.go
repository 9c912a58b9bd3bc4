// Package node implements the node side of gpufabric's claim lifecycle: the
// kubeletplugin.DRAPlugin that prepares and unprepares ResourceClaims on one
// node.
//
// Rules:
//   - PrepareResourceClaims and UnprepareResourceClaims are idempotent and
//     return exactly one entry per claim; one failing claim never fails the
//     batch.
//   - A device (pool/device, or device share) is prepared for at most one
//     claim at a time; a second claim gets ErrDoubleBooked. Preparing the
//     same claim again (same UID: e.g. a claim reserved for a PodGroup and
//     used by several pods on this node) is not double-booking.
//   - Every call locks the state (an in-process mutex plus a file lock, so
//     that two plugin instances during a rolling update never interleave),
//     re-reads the checkpoint if another instance changed it, and writes it
//     atomically. The Driver is safe for concurrent use.
//   - A claim is checkpointed as PrepareStarted before its CDI spec is
//     written and as PrepareCompleted after; recovery redoes or rolls back
//     what a crash left half done, redoes everything after a reboot (boot id)
//     and rebuilds the checkpoint from the CDI specs when it is corrupt.
package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/claims/cdi"
	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
)

// DefaultBootIDPath is where Linux exposes the current boot's id.
const DefaultBootIDPath = "/proc/sys/kernel/random/boot_id"

// DefaultHealthResendInterval is how often WatchHealthStatus re-sends the
// current health when nothing changed (the kubelet's lease is 30 s).
const DefaultHealthResendInterval = 10 * time.Second

// lockFileName is the file lock next to the checkpoint.
const lockFileName = "checkpoint.lock"

// Config configures a Driver. Fields marked required must be set.
type Config struct {
	// NodeName is this node's name (required).
	NodeName string
	// PoolName is the node-local pool the plugin publishes; gpu-* and nic-*
	// devices of any other pool are refused. Default: NodeName.
	PoolName string
	// CDIRoot is the CDI spec directory the container runtime reads, e.g.
	// /var/run/cdi (required). It is created if missing.
	CDIRoot string
	// StateDir holds checkpoint.json and its lock (required), e.g.
	// /var/lib/kubelet/plugins/gpufabric.dev. It is created if missing.
	StateDir string
	// BootIDPath is read to detect reboots. Default: DefaultBootIDPath.
	BootIDPath string
	// Resolver resolves node-local devices (required).
	Resolver claims.DeviceResolver
	// Channels resolves fabric-domain channels. Default:
	// claims.FabricChannelResolver{} (no domain check, no IMEX channels).
	Channels claims.ChannelResolver
	// DriverEdits, if set, returns the driver installation's container
	// edits (libraries, binaries, hooks: devices.DriverEdits), which every
	// claim with a GPU gets as its spec's own edits. An error fails the
	// claim (ErrCDI): a GPU without its driver would fail in the pod.
	DriverEdits func(ctx context.Context) (*cdispec.ContainerEdits, error)
	// ClaimGetter, if set, drops claims that no longer exist in the API
	// when the state is rebuilt from CDI specs.
	ClaimGetter claims.ClaimGetter
	// Registry registers the driver's metrics; nil means not exported.
	Registry prometheus.Registerer
	// HealthUpdates feeds device health (full or partial reports) to
	// WatchHealthStatus. Nil: WatchHealthStatus returns ErrHealthNotSupported.
	HealthUpdates <-chan kubeletplugin.DeviceHealthReport
	// HealthResendInterval (default DefaultHealthResendInterval) must stay
	// below the kubelet's 30 s health lease.
	HealthResendInterval time.Duration
	// OnEvent, if set, is called for things an operator should see (the
	// cmd can turn them into Kubernetes Events). It is called with the
	// state locked: it must not block long nor call the Driver.
	OnEvent func(ctx context.Context, ev Event)
	// OnFatalError, if set, is called by HandleError for errors that are
	// not kubeletplugin.ErrRecoverable, e.g. to cancel the main context.
	OnFatalError func(err error)
	// DisableFsync skips fsync for benchmarks and tests. Never in production.
	DisableFsync bool
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Event is something an operator should see, e.g. a corrupted checkpoint.
type Event struct {
	// Type is "Normal" or "Warning" (corev1.EventTypeNormal/Warning).
	Type    string
	Reason  string
	Message string
	// Claim is the claim concerned, if any.
	Claim *kubeletplugin.NamespacedObject
}

// Event reasons.
const (
	ReasonCheckpointCorrupt = "CheckpointCorrupt"
	ReasonClaimRedone       = "ClaimPreparationRedone"
	ReasonClaimRolledBack   = "ClaimPreparationRolledBack"
	ReasonStaleClaimRemoved = "StaleClaimRemoved"
)

// Driver implements kubeletplugin.DRAPlugin for gpufabric.dev devices.
// It is safe for concurrent use.
type Driver struct {
	cfg     Config
	bootID  string
	file    *checkpoint.File
	specs   *cdi.Dir
	metrics *metrics
	health  *healthHub

	// mu serializes state access in this process; lock (a flock) across
	// processes. cached/stamp avoid re-reading an unchanged checkpoint.
	mu     sync.Mutex
	lock   *os.File
	cached *checkpoint.Checkpoint
	stamp  fileStamp
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// NewDriver checks cfg, creates the directories, and recovers the node
// state (see the package rules) before returning. ctx bounds the recovery
// and the health feed goroutine. Call Close when done.
func NewDriver(ctx context.Context, cfg Config) (*Driver, error) {
	if err := cfg.complete(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir: %w", err)
	}
	specs, err := cdi.NewDir(cfg.CDIRoot, !cfg.DisableFsync)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(cfg.StateDir, lockFileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	d := &Driver{
		cfg:     cfg,
		bootID:  readBootID(ctx, cfg.BootIDPath, cfg.Now()),
		file:    checkpoint.NewFile(filepath.Join(cfg.StateDir, checkpoint.FileName), !cfg.DisableFsync),
		specs:   specs,
		metrics: m,
		lock:    lock,
	}
	if err := d.recoverAtStart(ctx); err != nil {
		_ = lock.Close()
		return nil, err
	}
	if cfg.HealthUpdates != nil {
		d.health = newHealthHub(cfg.Now)
		go d.health.run(ctx, cfg.HealthUpdates)
	}
	return d, nil
}

func (cfg *Config) complete() error {
	var missing []string
	for name, v := range map[string]string{"NodeName": cfg.NodeName, "CDIRoot": cfg.CDIRoot, "StateDir": cfg.StateDir} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if cfg.Resolver == nil {
		missing = append(missing, "Resolver")
	}
	if len(missing) > 0 {
		return fmt.Errorf("config lacks %s", strings.Join(missing, ", "))
	}
	if cfg.PoolName == "" {
		cfg.PoolName = cfg.NodeName
	}
	if cfg.BootIDPath == "" {
		cfg.BootIDPath = DefaultBootIDPath
	}
	if cfg.Channels == nil {
		cfg.Channels = claims.FabricChannelResolver{}
	}
	if cfg.HealthResendInterval <= 0 {
		cfg.HealthResendInterval = DefaultHealthResendInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return nil
}

// readBootID returns the boot id, or a per-process id if it cannot be read:
// then every start counts as a reboot and redoes all claims (safe, slower).
func readBootID(ctx context.Context, path string, now time.Time) string {
	b, err := os.ReadFile(path)
	id := strings.TrimSpace(string(b))
	if err == nil && id != "" {
		return id
	}
	if err == nil {
		err = errors.New("empty boot id")
	}
	klog.FromContext(ctx).Error(err, "Cannot read the boot id, treating this start as a reboot", "path", path)
	return "unknown-" + now.UTC().Format(time.RFC3339Nano)
}

// BootID returns the boot id the driver uses.
func (d *Driver) BootID() string { return d.bootID }

// Close releases the state lock file. The Driver must not be used after.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lock.Close()
}

// HandleError implements kubeletplugin.DRAPlugin: it logs background errors
// and calls Config.OnFatalError for errors that are not recoverable.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	utilruntime.HandleErrorWithContext(ctx, err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && d.cfg.OnFatalError != nil {
		d.cfg.OnFatalError(err)
	}
}

func (d *Driver) emit(ctx context.Context, ev Event) {
	if d.cfg.OnEvent != nil {
		d.cfg.OnEvent(ctx, ev)
	}
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin. Without
// Config.HealthUpdates it returns kubeletplugin.ErrHealthNotSupported.
// Otherwise it sends the current health of all devices seen so far at once
// (as soon as the first report arrived), again on every change, and at
// least every Config.HealthResendInterval, until ctx is done. Several calls
// may run at the same time (the kubelet reconnecting).
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	if d.health == nil {
		return kubeletplugin.ErrHealthNotSupported
	}
	return d.health.watch(ctx, reports, d.cfg.HealthResendInterval)
}
