package volumepins

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
)

// Pins reads the persistent volumes that pin a gang's members to nodes,
// from the informers' listers.
type Pins struct {
	PVCs           corelisters.PersistentVolumeClaimLister
	PVs            corelisters.PersistentVolumeLister
	StorageClasses storagelisters.StorageClassLister
}

// Pin sets each member's VolumePins from its persistent volumes.
// Rules: a volume whose claim is bound to a PersistentVolume with node
// affinity pins the member to the nodes that match it; a claim not bound
// yet makes the gang wait (ErrNotReady), unless its StorageClass binds only
// for a first consumer, which the engine does not do (ErrUnsupported: the
// gang is refused with the volume named). A generic ephemeral volume is the
// claim <pod>-<volume> that kube-controller-manager creates.
func (v *Pins) Pin(g *placement.Gang) error {
	for i := range g.Members {
		pins, err := v.volumePins(g.Members[i].Pod)
		if err != nil {
			return err
		}
		g.Members[i].VolumePins = pins
	}
	return nil
}

func (v *Pins) volumePins(p *v1.Pod) ([]*v1.NodeSelector, error) {
	var pins []*v1.NodeSelector
	for i, vol := range p.Spec.Volumes {
		var claim string
		switch {
		case vol.PersistentVolumeClaim != nil:
			claim = vol.PersistentVolumeClaim.ClaimName
		case vol.Ephemeral != nil:
			claim = p.Name + "-" + vol.Name
		default:
			continue
		}
		field := fmt.Sprintf("spec.volumes[%d] (%s)", i, vol.Name)
		pvc, err := v.PVCs.PersistentVolumeClaims(p.Namespace).Get(claim)
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: pod %s/%s: %s: persistent volume claim %s does not exist", placement.ErrNotReady, p.Namespace, p.Name, field, claim)
		}
		if err != nil {
			return nil, fmt.Errorf("get persistent volume claim %s/%s: %w", p.Namespace, claim, err)
		}
		if pvc.Spec.VolumeName == "" {
			if v.delayedBinding(pvc) {
				return nil, fmt.Errorf("pod %s/%s: %s: claim %s waits for its first consumer to be bound (volumeBindingMode WaitForFirstConsumer): %w",
					p.Namespace, p.Name, field, claim, placement.ErrUnsupported)
			}
			return nil, fmt.Errorf("%w: pod %s/%s: %s: persistent volume claim %s is not bound yet", placement.ErrNotReady, p.Namespace, p.Name, field, claim)
		}
		pv, err := v.PVs.Get(pvc.Spec.VolumeName)
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: pod %s/%s: %s: persistent volume %s does not exist", placement.ErrNotReady, p.Namespace, p.Name, field, pvc.Spec.VolumeName)
		}
		if err != nil {
			return nil, fmt.Errorf("get persistent volume %s: %w", pvc.Spec.VolumeName, err)
		}
		if na := pv.Spec.NodeAffinity; na != nil && na.Required != nil {
			pins = append(pins, na.Required)
		}
	}
	return pins, nil
}

// delayedBinding reports whether an unbound claim's StorageClass binds
// volumes only when a pod using it is scheduled.
func (v *Pins) delayedBinding(pvc *v1.PersistentVolumeClaim) bool {
	name := pvc.Spec.StorageClassName
	if name == nil || *name == "" {
		return false
	}
	sc, err := v.StorageClasses.Get(*name)
	return err == nil && sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer
}
