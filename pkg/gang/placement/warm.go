package placement

import (
	"context"
	"fmt"
)

// Warm does ahead of time the work the first gang placed on a new snapshot
// would otherwise pay: for each named class, the class's matches of every
// node-local device (CEL, kept in the MatchCache when there is one) and the
// free-device index of every level of the fabric tree. Snapshots Cache.Update
// derives from this one keep both, so warming once after the informers sync
// takes that cost out of the first gang's placement (0.3-1.3 s at 5,000
// nodes, docs/benchmarks.md).
//
// Rules: it costs in proportion to the cluster's devices per class and
// changes no decision (Place builds the same indexes on first use); classes
// the snapshot does not have are skipped; it checks ctx between classes and
// levels and, once ctx is done, returns the classes warmed whole so far with
// ctx's error. Idempotent. Not safe for concurrent use, like the Snapshot.
func (s *Snapshot) Warm(ctx context.Context, classes []string) (int, error) {
	warmed := 0
	for _, class := range classes {
		if _, err := s.classes.Get(class); err != nil {
			continue
		}
		for _, l := range s.tree.Levels {
			if err := ctx.Err(); err != nil {
				return warmed, fmt.Errorf("warm class %s: %w", class, context.Cause(ctx))
			}
			if _, err := s.index(ctx, l, class); err != nil {
				return warmed, fmt.Errorf("warm class %s at level %s: %w", class, l.Key, err)
			}
		}
		warmed++
	}
	return warmed, nil
}

// LevelIndexes reports how many level indexes (level × class) the snapshot
// holds: each is built on first use, by Place or Warm.
func (s *Snapshot) LevelIndexes() int { return len(s.levels) }
