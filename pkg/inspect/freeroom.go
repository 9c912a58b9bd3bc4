package inspect

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpufabric/gpufabric/pkg/gang/freeroom"
)

// FreeRoomReport is what `status` shows a user who may not list nodes or
// ResourceSlices cluster-wide: the free-room view gpufabric-scheduler
// publishes for tenants (pkg/gang/freeroom).
type FreeRoomReport struct {
	// Source is the ConfigMap the view was read from: "namespace/name".
	Source string `json:"source"`
	// Reason is why the cluster-wide lists were not used.
	Reason string         `json:"reason"`
	View   *freeroom.View `json:"view"`
}

// RenderFreeRoom prints where the view comes from and when it was taken,
// one table per level (the domains with the most free GPUs, with an
// occupancy bar), the domains left out, the counts of domains with at
// least 1, 2, 4, … GPUs free, and the cluster's totals.
func RenderFreeRoom(w io.Writer, r *FreeRoomReport, st Style) error {
	v := r.View
	fmt.Fprintf(w, "Cluster-wide lists are forbidden to you (%s).\n", r.Reason)
	fmt.Fprintf(w, "This is the free room gpufabric-scheduler publishes in %s, counted %s ago (%s);\n",
		r.Source, age(st.Now, v.Time), v.Time.UTC().Format("2006-01-02T15:04:05Z"))
	fmt.Fprintf(w, "free GPUs are those no claim holds (device-tainted GPUs included), rewritten when they change.\n\n")
	for _, l := range v.Levels {
		if l.Domains == 0 {
			continue
		}
		t := newTable(w)
		t.row(levelHeader(l.Key), "GPUS", "FREE", "OCCUPANCY")
		for _, d := range l.Top {
			c := GPUCounts{Total: d.GPUs, Used: d.GPUs - d.Free, Free: d.Free}
			t.row(d.ID, strconv.Itoa(d.GPUs), strconv.Itoa(d.Free), bar(c, st.BarWidth, st.Color))
		}
		if err := t.flush(); err != nil {
			return err
		}
		if l.Omitted > 0 && len(l.Top) > 0 {
			fmt.Fprintf(w, "(%d more, with at most %d free each)\n", l.Omitted, l.Top[len(l.Top)-1].Free)
		}
		fmt.Fprintf(w, "%s, %d GPUs free, the most in one %d; domains with %s\n\n",
			plural(l.Domains, "domain", "domains"), l.FreeGPUs, l.LargestFree, atLeast(l.AtLeast))
	}
	if sp := v.Spares; sp != nil {
		fmt.Fprintf(w, "Spares (%d per %s, kept for replacements, not counted free): %s, %d GPUs; %s short of spares\n",
			sp.PerDomain, sp.Level, plural(sp.KeptNodes, "node", "nodes"), sp.KeptGPUs, plural(sp.DomainsShort, "domain", "domains"))
	}
	_, err := fmt.Fprintf(w, "Cluster: %s, %d free\nLegend: %s held by claims  %s free\n", plural(v.GPUs, "GPU", "GPUs"), v.FreeGPUs, cellUsed, cellFree)
	return err
}

// atLeast writes the domains with at least N free: "≥1 free: 5, ≥2: 3,
// …".
func atLeast(counts []freeroom.Count) string {
	if len(counts) == 0 {
		return "GPUs: " + none
	}
	parts := make([]string, len(counts))
	for i, c := range counts {
		parts[i] = fmt.Sprintf("≥%d: %d", c.GPUs, c.Domains)
		if i == 0 {
			parts[i] = fmt.Sprintf("≥%d free: %d", c.GPUs, c.Domains)
		}
	}
	return strings.Join(parts, ", ")
}
