package placement

import "github.com/gpufabric/gpufabric/pkg/gang/placement/extended"

// extendedNote is the line a refusal adds for the members' extended
// resources backed by DRA (extended.Note).
func extendedNote(g *Gang) string {
	rs := make([]*extended.Resources, len(g.Members))
	for i, m := range g.Members {
		rs[i] = m.Extended
	}
	return extended.Note(rs)
}
