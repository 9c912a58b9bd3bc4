package main

import (
	"context"
	"encoding/json"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// ownLease gives the leader-election Lease an owner reference to the
// DeviceClass fabric-domain.gpufabric.dev, the owner of the fabric-domain
// pools too (pkg/gang/domains): `helm uninstall` deletes the class and the
// garbage collector then deletes the Lease, which the chart cannot create
// itself (the first leader does). Called by the leader when its term
// starts; a failure only means the Lease outlives an uninstall, so it is
// logged, not returned.
func ownLease(ctx context.Context, client kubernetes.Interface, namespace, name string) {
	logger := klog.FromContext(ctx).WithValues("lease", klog.KRef(namespace, name))
	if err := setLeaseOwner(ctx, client, namespace, name); err != nil {
		logger.Info("The Lease has no owner and will outlive an uninstall", "err", err)
	}
}

func setLeaseOwner(ctx context.Context, client kubernetes.Interface, namespace, name string) error {
	class, err := client.ResourceV1().DeviceClasses().Get(ctx, topology.FabricDomainDeviceClass, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("owner DeviceClass %s: %w", topology.FabricDomainDeviceClass, err)
	}
	lease, err := client.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read the Lease: %w", err)
	}
	for _, r := range lease.OwnerReferences {
		if r.UID == class.UID {
			return nil
		}
	}
	ref := metav1.OwnerReference{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass", Name: class.Name, UID: class.UID}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{ref}}})
	if err != nil {
		return err
	}
	// Strategic merge: owner references merge by UID; the elector's next
	// renewal may conflict once and retry.
	if _, err := client.CoordinationV1().Leases(namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("patch the Lease's owner: %w", err)
	}
	return nil
}
