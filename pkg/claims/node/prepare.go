package node

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/claims/cdi"
	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
	"github.com/gpufabric/gpufabric/pkg/claims/config"
	"github.com/gpufabric/gpufabric/pkg/topology"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Name prefixes of topology.GPUDeviceName, NICDeviceName, ChannelDeviceName
// and FabricDomainPoolName (TestNamePrefixes keeps them in sync).
const (
	gpuPrefix        = "gpu-"
	nicPrefix        = "nic-"
	channelPrefix    = "channel-"
	fabricPoolPrefix = "fabric-domain."
)

// plan is the work to prepare one claim.
type plan struct {
	claim *resourceapi.ResourceClaim
	entry *checkpoint.Claim
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin. It prepares
// the gpufabric.dev results of each claim: one CDI spec file per claim,
// recorded in the checkpoint. It is idempotent, returns one result per
// claim, and never fails the batch for one claim; the overall error is
// always nil.
func (d *Driver) PrepareResourceClaims(ctx context.Context, rcs []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	start := time.Now()
	defer func() { d.metrics.prepareSeconds.Observe(time.Since(start).Seconds()) }()
	results := make(map[types.UID]kubeletplugin.PrepareResult, len(rcs))
	notReady := d.waitChannels(ctx, rcs)
	s, release, err := d.begin(ctx)
	if err != nil {
		for _, rc := range rcs {
			results[rc.UID] = d.prepareFailed(ctx, rc, err)
		}
		return results, nil
	}
	defer release()
	holders := s.cp.Holders()
	planned := map[types.UID]bool{}
	var todo []*plan
	for _, rc := range rcs {
		if planned[rc.UID] {
			continue // the same claim twice in one call
		}
		if err := notReady[rc.UID]; err != nil {
			results[rc.UID] = d.prepareFailed(ctx, rc, err)
			continue
		}
		p, err := d.planClaim(ctx, s.cp, holders, rc)
		switch {
		case err != nil:
			results[rc.UID] = d.prepareFailed(ctx, rc, err)
		case p == nil:
			results[rc.UID] = prepareResult(s.cp.Claims[rc.UID])
		default:
			planned[rc.UID] = true
			todo = append(todo, p)
			for _, dev := range p.entry.Devices {
				if !dev.AdminAccess {
					holders[dev.Key()] = p.entry
				}
			}
		}
	}
	d.execute(ctx, s, todo, results)
	return results, nil
}

// waitChannels waits until the node can serve the fabric-domain channels
// of the claims (Channels.WaitReady, e.g. the IMEX daemon), once per domain
// and call, before the state is locked: a slow daemon never blocks other
// claims' prepare or unprepare. It returns the error of each claim whose
// domain is not ready.
func (d *Driver) waitChannels(ctx context.Context, rcs []*resourceapi.ResourceClaim) map[types.UID]error {
	checked := map[string]error{}
	out := map[types.UID]error{}
	for _, rc := range rcs {
		if rc.Status.Allocation == nil {
			continue
		}
		for _, r := range rc.Status.Allocation.Devices.Results {
			if r.Driver != topology.DriverName || !strings.HasPrefix(r.Pool, fabricPoolPrefix) {
				continue
			}
			domain := strings.TrimPrefix(r.Pool, fabricPoolPrefix)
			err, done := checked[domain]
			if !done {
				err = d.cfg.Channels.WaitReady(ctx, domain)
				checked[domain] = err
			}
			if err != nil && out[rc.UID] == nil {
				out[rc.UID] = fmt.Errorf("%w %s of pool %s: %w", ErrResolve, r.Device, r.Pool, err)
			}
		}
	}
	return out
}

func (d *Driver) prepareFailed(ctx context.Context, rc *resourceapi.ResourceClaim, err error) kubeletplugin.PrepareResult {
	d.metrics.prepareErrors.WithLabelValues(reason(err)).Inc()
	klog.FromContext(ctx).Error(err, "Cannot prepare claim", "claim", klog.KObj(rc), "uid", rc.UID)
	return kubeletplugin.PrepareResult{Err: fmt.Errorf("prepare claim %s/%s: %w", rc.Namespace, rc.Name, err)}
}

// planClaim checks one claim and its devices. It returns nil,nil
// if the claim is already prepared with this allocation in this boot.
func (d *Driver) planClaim(ctx context.Context, cp *checkpoint.Checkpoint, holders map[string]*checkpoint.Claim, rc *resourceapi.ResourceClaim) (*plan, error) {
	devs, err := ourDevices(rc)
	if err != nil {
		return nil, err
	}
	if err := applyConfigs(rc, devs); err != nil {
		return nil, err
	}
	fp := checkpoint.Fingerprint(devs)
	if prev := cp.Claims[rc.UID]; prev != nil && prev.State == checkpoint.StatePrepareCompleted &&
		prev.Fingerprint == fp && prev.BootID == d.bootID {
		if ok, err := d.specs.Exists(rc.UID); err == nil && ok {
			klog.FromContext(ctx).V(5).Info("Claim already prepared", "claim", klog.KObj(rc), "uid", rc.UID)
			return nil, nil
		}
	}
	for _, dev := range devs {
		if h := holders[dev.Key()]; h != nil && h.UID != rc.UID && !dev.AdminAccess {
			return nil, fmt.Errorf("%w: device %s of pool %s is prepared for claim %s/%s (uid %s)",
				ErrDoubleBooked, dev.Device, dev.Pool, h.Namespace, h.Name, h.UID)
		}
	}
	// Checked now, made (on-demand devices) once the claim is Started.
	if _, err := d.resolve(ctx, devs, false); err != nil {
		return nil, err
	}
	entry := &checkpoint.Claim{
		UID: rc.UID, Namespace: rc.Namespace, Name: rc.Name,
		State: checkpoint.StatePrepareStarted, BootID: d.bootID, Fingerprint: fp,
		Devices: devs, UpdatedAt: d.cfg.Now().UTC(),
	}
	return &plan{claim: rc, entry: entry}, nil
}

// execute records the planned claims as Started, makes their on-demand
// devices, writes their CDI specs, and records them as Completed: two
// durable checkpoint writes per call, whatever the number of claims. A
// claim that fails after Started is undone (its on-demand devices
// destroyed, its spec removed) before the Completed write drops it.
func (d *Driver) execute(ctx context.Context, s *session, todo []*plan, results map[types.UID]kubeletplugin.PrepareResult) {
	if len(todo) == 0 {
		return
	}
	for _, p := range todo {
		s.cp.Claims[p.claim.UID] = p.entry
	}
	if err := s.save(ctx); err != nil {
		for _, p := range todo {
			results[p.claim.UID] = d.prepareFailed(ctx, p.claim, err)
		}
		return
	}
	var done []*plan
	for _, p := range todo {
		if err := d.writeSpec(ctx, p.entry); err != nil {
			results[p.claim.UID] = d.prepareFailed(ctx, p.claim, err)
			_ = d.undoOnDemand(ctx, p.entry) // logged
			_ = d.specs.Remove(p.claim.UID)
			delete(s.cp.Claims, p.claim.UID)
			continue
		}
		p.entry.State = checkpoint.StatePrepareCompleted
		done = append(done, p)
	}
	if err := s.save(ctx); err != nil {
		for _, p := range done {
			results[p.claim.UID] = d.prepareFailed(ctx, p.claim, err)
		}
		return
	}
	for _, p := range done {
		results[p.claim.UID] = prepareResult(p.entry)
		klog.FromContext(ctx).V(2).Info("Prepared claim", "claim", klog.KObj(p.claim), "uid", p.claim.UID,
			"devices", len(p.entry.Devices), "reservedFor", p.claim.Status.ReservedFor)
	}
}

// ourDevices returns the claim's allocation results of this driver.
func ourDevices(rc *resourceapi.ResourceClaim) ([]checkpoint.Device, error) {
	if rc.Status.Allocation == nil {
		return nil, ErrNotAllocated
	}
	var devs []checkpoint.Device
	for _, r := range rc.Status.Allocation.Devices.Results {
		if r.Driver != topology.DriverName {
			continue
		}
		dev := checkpoint.Device{Request: r.Request, Pool: r.Pool, Device: r.Device}
		if r.AdminAccess != nil {
			dev.AdminAccess = *r.AdminAccess
		}
		if r.ShareID != nil {
			dev.ShareID = string(*r.ShareID)
		}
		devs = append(devs, dev)
	}
	if len(devs) == 0 {
		return nil, ErrNoDevices
	}
	return devs, nil
}

// applyConfigs sets each device's ConfigEnv from the claim's gpufabric.dev
// opaque configs (see package config); an invalid one fails the claim.
func applyConfigs(rc *resourceapi.ResourceClaim, devs []checkpoint.Device) error {
	requests := make([]string, 0, len(devs))
	for _, d := range devs {
		requests = append(requests, d.Request)
	}
	env, err := config.RequestEnv(rc.Status.Allocation.Devices.Config, requests)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	for i := range devs {
		devs[i].ConfigEnv = env[devs[i].Request]
	}
	return nil
}

// writeSpec makes the claim's on-demand devices, builds its CDI spec from
// all devices' edits and writes it; the devices' CDI ids are set.
func (d *Driver) writeSpec(ctx context.Context, c *checkpoint.Claim) error {
	cdevs, err := d.resolve(ctx, c.Devices, true)
	if err != nil {
		return err
	}
	var driver *cdispec.ContainerEdits
	if d.cfg.DriverEdits != nil && slices.ContainsFunc(cdevs, func(cd cdi.Device) bool { return cd.Type == topology.DeviceTypeGPU }) {
		if driver, err = d.cfg.DriverEdits(ctx); err != nil {
			return fmt.Errorf("%w: driver files: %w", ErrCDI, err)
		}
	}
	spec, ids, err := cdi.BuildSpec(cdi.ClaimRef{UID: c.UID, Namespace: c.Namespace, Name: c.Name}, cdevs, driver)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCDI, err)
	}
	if err := d.specs.Write(c.UID, spec); err != nil {
		return fmt.Errorf("%w: %w", ErrCDI, err)
	}
	for i := range c.Devices {
		c.Devices[i].CDIDeviceIDs = []string{ids[i]}
	}
	return nil
}

// onDemand reports whether the resolver makes dev at prepare.
func (d *Driver) onDemand(dev checkpoint.Device) (claims.DevicePreparer, bool) {
	p, ok := d.cfg.Resolver.(claims.DevicePreparer)
	return p, ok && dev.Pool == d.cfg.PoolName && p.OnDemand(dev.Device)
}

// undoOnDemand destroys a claim's on-demand devices, logging failures; it
// returns the first.
func (d *Driver) undoOnDemand(ctx context.Context, c *checkpoint.Claim) error {
	var first error
	for _, dev := range c.Devices {
		if p, ok := d.onDemand(dev); ok {
			if err := p.UnprepareDevice(ctx, dev.Device); err != nil {
				klog.FromContext(ctx).Error(err, "Cannot destroy device", "claim", klog.KRef(c.Namespace, c.Name), "device", dev.Device)
				if first == nil {
					first = fmt.Errorf("%w %s: %w", ErrResolve, dev.Device, err)
				}
			}
		}
	}
	return first
}

// resolve asks the resolvers what each device needs. On-demand devices
// (claims.DevicePreparer) are made when create is set; otherwise they are
// only checked to be known, and get no edits.
func (d *Driver) resolve(ctx context.Context, devs []checkpoint.Device, create bool) ([]cdi.Device, error) {
	out := make([]cdi.Device, 0, len(devs))
	for _, dev := range devs {
		cd := cdi.Device{Result: dev, Type: deviceType(dev)}
		prep, onDemand := d.onDemand(dev)
		var err error
		switch {
		case onDemand && dev.AdminAccess:
			err = fmt.Errorf("admin access to a device made at prepare is not supported: %w", claims.ErrUnknownDevice)
		case onDemand && create:
			cd.Edits, err = prep.PrepareDevice(ctx, dev.Device)
		case onDemand:
		case cd.Type == topology.DeviceTypeFabricDomain:
			n, perr := strconv.Atoi(strings.TrimPrefix(dev.Device, channelPrefix))
			if perr != nil || !strings.HasPrefix(dev.Device, channelPrefix) {
				err = fmt.Errorf("not a channel device: %w", claims.ErrUnknownDevice)
				break
			}
			cd.Edits, err = d.cfg.Channels.ChannelEdits(strings.TrimPrefix(dev.Pool, fabricPoolPrefix), n)
		case dev.Pool != d.cfg.PoolName:
			return nil, fmt.Errorf("%w: device %s of pool %s (this node's pool is %s)", ErrNotOnNode, dev.Device, dev.Pool, d.cfg.PoolName)
		case cd.Type == "":
			err = fmt.Errorf("unknown device type: %w", claims.ErrUnknownDevice)
		default:
			cd.Edits, err = d.cfg.Resolver.ContainerEdits(dev.Device)
		}
		if err != nil {
			return nil, fmt.Errorf("%w %s of pool %s: %w", ErrResolve, dev.Device, dev.Pool, err)
		}
		out = append(out, cd)
	}
	return out, nil
}

// deviceType derives the device type from the names fixed in topology.
func deviceType(dev checkpoint.Device) string {
	switch {
	case strings.HasPrefix(dev.Pool, fabricPoolPrefix):
		return topology.DeviceTypeFabricDomain
	case strings.HasPrefix(dev.Device, gpuPrefix):
		return topology.DeviceTypeGPU
	case strings.HasPrefix(dev.Device, nicPrefix):
		return topology.DeviceTypeNIC
	}
	return ""
}

func prepareResult(c *checkpoint.Claim) kubeletplugin.PrepareResult {
	res := kubeletplugin.PrepareResult{Devices: make([]kubeletplugin.Device, 0, len(c.Devices))}
	for _, dev := range c.Devices {
		kd := kubeletplugin.Device{
			Requests:     []string{dev.Request},
			PoolName:     dev.Pool,
			DeviceName:   dev.Device,
			CDIDeviceIDs: dev.CDIDeviceIDs,
		}
		if dev.ShareID != "" {
			id := types.UID(dev.ShareID)
			kd.ShareID = &id
		}
		res.Devices = append(res.Devices, kd)
	}
	return res
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin: it removes
// each claim's CDI spec file and checkpoint entry. Unpreparing a claim that
// is not prepared succeeds (and removes a stray spec file of that UID).
// One result per claim; the overall error is always nil.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, refs []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	start := time.Now()
	defer func() { d.metrics.unprepareSeconds.Observe(time.Since(start).Seconds()) }()
	logger := klog.FromContext(ctx)
	results := make(map[types.UID]error, len(refs))
	s, release, err := d.begin(ctx)
	if err != nil {
		for _, r := range refs {
			results[r.UID] = d.unprepareFailed(ctx, r, err)
		}
		return results, nil
	}
	defer release()
	var removed []kubeletplugin.NamespacedObject
	for _, r := range refs {
		results[r.UID] = nil
		entry := s.cp.Claims[r.UID]
		if entry != nil {
			// Devices made at prepare go first: if that fails, the claim
			// stays prepared and the kubelet retries.
			if err := d.undoOnDemand(ctx, entry); err != nil {
				results[r.UID] = d.unprepareFailed(ctx, r, err)
				continue
			}
		}
		if err := d.specs.Remove(r.UID); err != nil {
			results[r.UID] = d.unprepareFailed(ctx, r, fmt.Errorf("%w: %w", ErrCDI, err))
			continue
		}
		if entry == nil {
			logger.V(4).Info("Claim is not prepared, nothing to undo", "claim", r)
			continue
		}
		delete(s.cp.Claims, r.UID)
		removed = append(removed, r)
		logger.V(2).Info("Unprepared claim", "claim", r, "devices", deviceNames(entry))
	}
	if len(removed) == 0 {
		return results, nil
	}
	if err := s.save(ctx); err != nil {
		for _, r := range removed {
			results[r.UID] = d.unprepareFailed(ctx, r, err)
		}
	}
	return results, nil
}

func (d *Driver) unprepareFailed(ctx context.Context, r kubeletplugin.NamespacedObject, err error) error {
	d.metrics.unprepareErrors.WithLabelValues(reason(err)).Inc()
	klog.FromContext(ctx).Error(err, "Cannot unprepare claim", "claim", r)
	return fmt.Errorf("unprepare claim %s: %w", r.NamespacedName, err)
}

func deviceNames(c *checkpoint.Claim) []string {
	names := make([]string, 0, len(c.Devices))
	for _, dev := range c.Devices {
		names = append(names, dev.Pool+"/"+dev.Device)
	}
	return names
}
