package node

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/claims/checkpoint"
)

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
