package scheduler

import (
	"context"
	"encoding/json"
	"fmt"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// AnnotationPlacement holds a PodGroup's commit intent while the commit is
// in flight: written before the first claim write, removed after the last
// write. Its presence means "a commit of this gang may be half done".
const AnnotationPlacement = topology.DriverName + "/placement"

// intent is the JSON of AnnotationPlacement.
type intent struct {
	// Domain and TopologyKey where the gang goes, for events and humans.
	Domain      string `json:"domain"`
	TopologyKey string `json:"key,omitempty"`
	// Pods: name, UID and node of every member being bound.
	Pods []intentPod `json:"pods"`
	// Claims the commit writes (allocations or reservations).
	Claims []string `json:"claims"`
}

type intentPod struct {
	Name string    `json:"n"`
	UID  types.UID `json:"u"`
	Node string    `json:"node"`
}

func newIntent(d *placement.Decision, claims []claimWrite) intent {
	in := intent{Domain: d.Domain, TopologyKey: d.TopologyKey, Pods: []intentPod{}, Claims: []string{}}
	for _, p := range d.Pods {
		in.Pods = append(in.Pods, intentPod{Name: p.Name, UID: p.UID, Node: p.Node})
	}
	for _, w := range claims {
		in.Claims = append(in.Claims, w.claim.Name)
	}
	return in
}

func parseIntent(pg *schedulingv1beta1.PodGroup) (intent, bool, error) {
	raw, ok := pg.Annotations[AnnotationPlacement]
	if !ok {
		return intent{}, false, nil
	}
	var in intent
	if err := json.Unmarshal([]byte(raw), &in); err != nil {
		return intent{}, true, fmt.Errorf("parse %s annotation: %w", AnnotationPlacement, err)
	}
	return in, true, nil
}

// patchIntent sets (in != nil) or removes the intent annotation and returns
// the updated PodGroup. The patch carries the PodGroup's UID, so it never
// lands on a recreated PodGroup.
func (s *Scheduler) patchIntent(ctx context.Context, pg *schedulingv1beta1.PodGroup, in *intent) (*schedulingv1beta1.PodGroup, error) {
	var value any // nil removes the annotation in a merge patch
	step := StepClearIntent
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode intent: %w", err)
		}
		value, step = string(raw), StepIntent
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pg.UID,
		"annotations": map[string]any{AnnotationPlacement: value},
	}})
	if err != nil {
		return nil, fmt.Errorf("encode patch: %w", err)
	}
	if err := s.step(step, pg.Namespace+"/"+pg.Name); err != nil {
		return nil, err
	}
	out, err := s.cfg.Client.SchedulingV1beta1().PodGroups(pg.Namespace).Patch(ctx, pg.Name, types.MergePatchType, patch, metav1PatchOptions)
	if err != nil {
		return nil, fmt.Errorf("patch podgroup %s/%s %s: %w", pg.Namespace, pg.Name, step, err)
	}
	return out, nil
}

// step runs the commit hook before a write.
func (s *Scheduler) step(step Step, object string) error {
	if s.cfg.CommitHook == nil {
		return nil
	}
	if err := s.cfg.CommitHook(step, object); err != nil {
		return fmt.Errorf("%w at %s %s: %w", ErrAborted, step, object, err)
	}
	return nil
}
