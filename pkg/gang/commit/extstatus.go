package commit

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
)

// A placed member with extended resources backed by DRA
// (pkg/gang/placement/extended) gets its pod's
// status.extendedResourceClaimStatus written after its claim is allocated
// and reserved for it, and before its binding, as kube-scheduler 1.37
// writes it in PreBind: the kubelet prepares the claim that status names
// when the pod arrives, and admits the pod's extended resources by its
// mappings. The status cannot be cleared (the apiserver keeps it), so an
// undone commit leaves it; it names the pod's one special claim, which a
// later commit allocates again, and is rewritten only when it differs.

// statusWrite is one pod's extendedResourceClaimStatus to write.
type statusWrite struct {
	pod    *v1.Pod
	status v1.PodExtendedResourceClaimStatus
}

// extendedStatuses lists the status writes of a decision: the placed
// members with extended resources whose pod does not say so already.
func extendedStatuses(g *placement.Gang, d *placement.Decision) []statusWrite {
	placed := make(map[types.UID]bool, len(d.Pods))
	for _, pp := range d.Pods {
		placed[pp.UID] = true
	}
	var out []statusWrite
	for _, m := range g.Members {
		x := m.Extended
		if x == nil || !placed[m.Pod.UID] {
			continue
		}
		if cur := m.Pod.Status.ExtendedResourceClaimStatus; cur != nil && equality.Semantic.DeepEqual(*cur, x.Status) {
			continue
		}
		out = append(out, statusWrite{pod: m.Pod, status: x.Status})
	}
	return out
}

// writeStatuses runs one phase of status writes in parallel.
func (t *Txn) writeStatuses(ctx context.Context, writes []statusWrite) error {
	return Parallel(ctx, t.c.cfg.Parallelism, len(writes), func(ctx context.Context, i int) error {
		return writeExtendedStatus(ctx, t.c.cfg, writes[i])
	})
}

// writeExtendedStatus patches one pod's status.extendedResourceClaimStatus.
// The patch carries the pod's UID: a pod replaced by another of the same
// name is not written (the apiserver refuses to change a UID).
func writeExtendedStatus(ctx context.Context, cfg Config, w statusWrite) error {
	object := w.pod.Namespace + "/" + w.pod.Name
	if err := cfg.Gate.Check(gate.StepPodStatus, object); err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": w.pod.UID},
		"status":   map[string]any{"extendedResourceClaimStatus": w.status},
	})
	if err != nil {
		return fmt.Errorf("encode extendedResourceClaimStatus of pod %s: %w", object, err)
	}
	_, err = cfg.Client.CoreV1().Pods(w.pod.Namespace).Patch(ctx, w.pod.Name, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{FieldManager: schedulerName}, "status")
	if err != nil {
		return fmt.Errorf("write extendedResourceClaimStatus of pod %s: %w", object, err)
	}
	return nil
}

// extendedUnbindable says why recovery must not bind record pod i for its
// extended resources, "" when it may: a special claim of the pod's that
// the commit wrote must be the one its status names, and the claim its
// status names must be usable on node (read live).
func extendedUnbindable(ctx context.Context, c *Committer, rec *commitRecord, live *liveCommit, i int, node *v1.Node) string {
	p := live.members[i]
	st := p.Status.ExtendedResourceClaimStatus
	for j, rc := range rec.Claims {
		lc := live.claims[j]
		if lc == nil || !slices.Contains(rc.Pods, rec.Pods[i].Name) || lc.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" {
			continue
		}
		if owner := metav1.GetControllerOfNoCopy(lc); owner == nil || owner.UID != p.UID {
			continue
		}
		if st == nil || st.ResourceClaimName != lc.Name {
			return fmt.Sprintf("its status.extendedResourceClaimStatus does not name its claim %s", lc.Name)
		}
	}
	if st == nil {
		return ""
	}
	rc, err := c.cfg.Client.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, st.ResourceClaimName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Sprintf("its claim %s cannot be read: %v", st.ResourceClaimName, err)
	}
	if err != nil {
		rc = nil
	}
	if why := claimUsableOn(rc, p.UID, node); why != "" {
		return fmt.Sprintf("claim %s %s", st.ResourceClaimName, why)
	}
	return ""
}
