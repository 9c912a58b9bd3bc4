package domains

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Ownership: the fabric-domain pools are owned by the DeviceClass
// fabric-domain.gpufabric.dev, the cluster-scoped object the chart installs
// for them (claims reach the pools only through it). Deleting the class,
// as `helm uninstall` does, lets the garbage collector delete the pools,
// which no running scheduler is left to remove; the scheduler's RBAC is
// deleted with the release before the class, so it cannot publish them
// again. Without the class (deviceClasses.create: false and none made by
// hand) the pools have no owner and the publisher logs so.

// ownerClass returns the owner of the pools: the fabric-domain DeviceClass,
// or nil when it does not exist or cannot be read (logged).
func ownerClass(ctx context.Context, cfg Config) *resourceslice.Owner {
	logger := klog.FromContext(ctx)
	class, err := cfg.Client.ResourceV1().DeviceClasses().Get(ctx, topology.FabricDomainDeviceClass, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		logger.Info("No DeviceClass owns the fabric-domain pools: they outlive an uninstall", "deviceClass", topology.FabricDomainDeviceClass)
		return nil
	case err != nil:
		logger.Error(err, "Reading the owner of the fabric-domain pools failed; publishing them without owner", "deviceClass", topology.FabricDomainDeviceClass)
		return nil
	}
	return &resourceslice.Owner{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass", Name: class.Name, UID: class.UID}
}

// adopt gives the fabric-domain pools published without the owner (by a
// version that set none) an owner reference, so that they go with an
// uninstall too. The resourceslice controller sets it only on slices it
// creates.
func (p *Publisher) adopt(ctx context.Context) error {
	if p.owner == nil {
		return nil
	}
	slices, err := p.lister.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list resource slices: %w", err)
	}
	ref := metav1.OwnerReference{APIVersion: p.owner.APIVersion, Kind: p.owner.Kind, Name: p.owner.Name, UID: p.owner.UID}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{ref}}})
	if err != nil {
		return err
	}
	adopted := 0
	for _, s := range slices {
		if !ownPool(s) || owned(s, p.owner.UID) {
			continue
		}
		// Strategic merge: owner references merge by UID, others stay.
		if _, err := p.cfg.Client.ResourceV1().ResourceSlices().Patch(ctx, s.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("adopt fabric-domain slice %s: %w", s.Name, err)
		}
		adopted++
	}
	if adopted > 0 {
		klog.FromContext(ctx).Info("Adopted fabric-domain slices published without owner", "slices", adopted, "owner", p.owner.Name)
	}
	return nil
}

// ownPool reports whether s is a fabric-domain pool slice of this driver.
func ownPool(s *resourceapi.ResourceSlice) bool {
	return s.Spec.Driver == topology.DriverName && s.Spec.NodeName == nil && strings.HasPrefix(s.Spec.Pool.Name, topology.FabricDomainPoolName(""))
}

func owned(s *resourceapi.ResourceSlice, uid types.UID) bool {
	for _, r := range s.OwnerReferences {
		if r.UID == uid {
			return true
		}
	}
	return false
}
