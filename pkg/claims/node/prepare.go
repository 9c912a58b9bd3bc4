package node

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufabric/gpufabric/pkg/claims"
	"github.com/gpufabric/gpufabric/pkg/claims/cdi"
	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
	"github.com/gpufabric/gpufabric/pkg/topology"
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
	spec  *cdispec.Spec
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

func (d *Driver) prepareFailed(ctx context.Context, rc *resourceapi.ResourceClaim, err error) kubeletplugin.PrepareResult {
	d.metrics.prepareErrors.WithLabelValues(reason(err)).Inc()
	klog.FromContext(ctx).Error(err, "Cannot prepare claim", "claim", klog.KObj(rc), "uid", rc.UID)
	return kubeletplugin.PrepareResult{Err: fmt.Errorf("prepare claim %s/%s: %w", rc.Namespace, rc.Name, err)}
}

// planClaim checks one claim and computes its CDI spec. It returns nil,nil
// if the claim is already prepared with this allocation in this boot.
func (d *Driver) planClaim(ctx context.Context, cp *checkpoint.Checkpoint, holders map[string]*checkpoint.Claim, rc *resourceapi.ResourceClaim) (*plan, error) {
	devs, err := ourDevices(rc)
	if err != nil {
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
	cdevs, err := d.resolve(devs)
	if err != nil {
		return nil, err
	}
	spec, ids, err := cdi.BuildSpec(cdi.ClaimRef{UID: rc.UID, Namespace: rc.Namespace, Name: rc.Name}, cdevs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCDI, err)
	}
	for i := range devs {
		devs[i].CDIDeviceIDs = []string{ids[i]}
	}
	entry := &checkpoint.Claim{
		UID: rc.UID, Namespace: rc.Namespace, Name: rc.Name,
		State: checkpoint.StatePrepareStarted, BootID: d.bootID, Fingerprint: fp,
		Devices: devs, UpdatedAt: d.cfg.Now().UTC(),
	}
	return &plan{claim: rc, entry: entry, spec: spec}, nil
}

// execute records the planned claims as Started, writes their CDI specs,
// and records them as Completed: two durable checkpoint writes per call,
// whatever the number of claims.
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
		if err := d.specs.Write(p.claim.UID, p.spec); err != nil {
			results[p.claim.UID] = d.prepareFailed(ctx, p.claim, fmt.Errorf("%w: %w", ErrCDI, err))
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

// resolve asks the resolvers what each device needs.
func (d *Driver) resolve(devs []checkpoint.Device) ([]cdi.Device, error) {
	out := make([]cdi.Device, 0, len(devs))
	for _, dev := range devs {
		cd := cdi.Device{Result: dev, Type: deviceType(dev)}
		var err error
		switch {
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
