package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"
)

// warmBudget bounds the placement cache's warm-up after the informers
// sync: scheduling starts after it even when classes are left (their first
// gang then pays for them, as without a warm-up).
const warmBudget = 5 * time.Second

// warm builds the placement cache's first snapshot and its per-class level
// indexes before the first gang is tried, so that gang's placement does not
// pay for them (index.Snapshot.Warm). Classes the cluster's claims and
// claim templates request go first. A failure is logged, not returned: the
// first gang then builds what is missing, as it would without a warm-up.
// It runs in the worker's place (before it starts): snapshots are not safe
// for concurrent use.
func (sn *snapshots) warm(ctx context.Context) {
	if sn.cache == nil {
		return
	}
	logger := klog.FromContext(ctx)
	begin := time.Now()
	classes, err := sn.warmClasses()
	if err != nil {
		logger.Error(err, "Listing device classes for the placement warm-up")
		return
	}
	snap, err := sn.cache.Update(ctx, sn.snap)
	if err != nil {
		logger.Error(err, "Building the first snapshot")
		return
	}
	sn.snap = snap
	wctx, cancel := context.WithTimeout(ctx, warmBudget)
	defer cancel()
	n, err := snap.Warm(wctx, classes)
	switch {
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		logger.Info("Placement warm-up ran out of time; the first gangs of the other classes build their own indexes", "budget", warmBudget, "classesWarmed", n, "classes", len(classes))
	case err != nil:
		logger.Error(err, "Placement warm-up failed; the first gang builds what is missing", "classesWarmed", n)
	default:
		logger.Info("Placement cache warmed", "classes", n, "levelIndexes", snap.LevelIndexes(), "duration", time.Since(begin))
	}
}

// warmClasses lists the DeviceClasses to warm: those the claims and claim
// templates in the informers request (by name), then the others (by name).
func (sn *snapshots) warmClasses() ([]string, error) {
	all, err := sn.classes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list device classes: %w", err)
	}
	claims, err := sn.claims.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list resource claims: %w", err)
	}
	templates, err := sn.templates.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list resource claim templates: %w", err)
	}
	specs := make([]*resourceapi.DeviceClaim, 0, len(claims)+len(templates))
	for _, c := range claims {
		specs = append(specs, &c.Spec.Devices)
	}
	for _, t := range templates {
		specs = append(specs, &t.Spec.Spec.Devices)
	}
	names := make([]string, 0, len(all))
	for _, c := range all {
		names = append(names, c.Name)
	}
	return classOrder(names, specs), nil
}

// classOrder orders class names: those the device claims request first
// (most requests first, then by name), then the rest by name.
func classOrder(classes []string, specs []*resourceapi.DeviceClaim) []string {
	uses := map[string]int{}
	for _, d := range specs {
		for _, r := range d.Requests {
			if r.Exactly != nil {
				uses[r.Exactly.DeviceClassName]++
			}
			for _, sub := range r.FirstAvailable {
				uses[sub.DeviceClassName]++
			}
		}
	}
	out := slices.Clone(classes)
	slices.SortFunc(out, func(a, b string) int {
		if uses[a] != uses[b] {
			return uses[b] - uses[a]
		}
		return cmp.Compare(a, b)
	})
	return slices.Compact(out)
}
