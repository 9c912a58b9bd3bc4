package inspect

import (
	"fmt"
	"slices"
	"strings"

	schedulingv1alpha3 "k8s.io/api/scheduling/v1alpha3"
)

// maxTreeDepth bounds how far up a PodGroup's parents are followed (a tree
// has at most four levels, KEP-6012).
const maxTreeDepth = 4

// treePrefixes name a CompositePodGroup in an explain reference.
var treePrefixes = []string{"compositepodgroup", "compositepodgroups", "cpg"}

// resolveTree is the leaf PodGroups of the tree under the CompositePodGroup
// ns/name (whatever its level), sorted, found through their parents; and
// the tree's outline for the report: each composite with its topology key
// and minGroupCount, each PodGroup under its parent.
func resolveTree(c *Cluster, ns, name string) (Resolved, error) {
	if findComposite(c.Composites, ns, name) == nil {
		return Resolved{}, fmt.Errorf("CompositePodGroup %s/%s does not exist (or compositepodgroups.scheduling.k8s.io/v1alpha3 is not served)", ns, name)
	}
	var groups []string
	for i := range c.PodGroups {
		pg := &c.PodGroups[i]
		if pg.Namespace == ns && pg.Spec.ParentCompositePodGroupName != nil && under(c, ns, *pg.Spec.ParentCompositePodGroupName, name) {
			groups = append(groups, pg.Name)
		}
	}
	if len(groups) == 0 {
		return Resolved{}, fmt.Errorf("CompositePodGroup %s/%s has no PodGroup under it (spec.parentCompositePodGroupName)", ns, name)
	}
	slices.Sort(groups)
	return Resolved{Groups: groups, Workload: "compositepodgroup/" + name, Tree: outline(c, ns, name)}, nil
}

// under reports whether the composite parent is top or below it.
func under(c *Cluster, ns, parent, top string) bool {
	for range maxTreeDepth {
		if parent == top {
			return true
		}
		cpg := findComposite(c.Composites, ns, parent)
		if cpg == nil || cpg.Spec.ParentCompositePodGroupName == nil {
			return false
		}
		parent = *cpg.Spec.ParentCompositePodGroupName
	}
	return false
}

// outline describes the tree under ns/name, one line per group, indented
// by level.
func outline(c *Cluster, ns, name string) []string {
	var out []string
	var walk func(n string, depth int)
	walk = func(n string, depth int) {
		cpg := findComposite(c.Composites, ns, n)
		if cpg == nil || depth >= maxTreeDepth {
			return
		}
		out = append(out, strings.Repeat("  ", depth)+compositeLine(cpg))
		for i := range c.Composites {
			if k := &c.Composites[i]; k.Namespace == ns && k.Spec.ParentCompositePodGroupName != nil && *k.Spec.ParentCompositePodGroupName == n {
				walk(k.Name, depth+1)
			}
		}
		for i := range c.PodGroups {
			pg := &c.PodGroups[i]
			if pg.Namespace == ns && pg.Spec.ParentCompositePodGroupName != nil && *pg.Spec.ParentCompositePodGroupName == n {
				line := strings.Repeat("  ", depth+1) + "PodGroup/" + pg.Name
				if sc := pg.Spec.SchedulingConstraints; sc != nil && len(sc.Topology) > 0 {
					line += " in one " + sc.Topology[0].Key
				}
				out = append(out, line)
			}
		}
	}
	walk(name, 0)
	return out
}

func compositeLine(cpg *schedulingv1alpha3.CompositePodGroup) string {
	line := "CompositePodGroup/" + cpg.Name
	if sc := cpg.Spec.SchedulingConstraints; sc != nil && len(sc.Topology) > 0 {
		line += " in one " + sc.Topology[0].Key
	}
	if g := cpg.Spec.SchedulingPolicy.Gang; g != nil {
		line += fmt.Sprintf(", minGroupCount %d", g.MinGroupCount)
	}
	return line
}

func findComposite(cs []schedulingv1alpha3.CompositePodGroup, ns, name string) *schedulingv1alpha3.CompositePodGroup {
	for i := range cs {
		if cs[i].Namespace == ns && cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}
