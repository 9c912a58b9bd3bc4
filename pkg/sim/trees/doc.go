// Package trees is the simulator's hierarchical workloads (issue 25):
// tree jobs in a trace (segmented training jobs, disaggregated inference
// services), how they are drawn into a generated trace, how the baselines
// place them (kube-scheduler 1.37.1's CompositePodGroups, Kueue's podset
// slices), the CompositePodGroup tree the engine's search takes, and what a
// placed tree got (whole, as asked, segments in one NVLink domain, coupled
// roles on matching IB rails). pkg/sim replays the trees; this package
// knows nothing of its clusters, traces or policies.
//
// Files: spec.go (Spec: a tree in a trace, its validation and pods), mix.go
// (Mix: tree shapes drawn into a generated trace), topology.go (Topology:
// the fabric as the baselines and the metrics see it; Devices: GPUs taken
// by position, for rails), run.go (one baseline decision: a copy of the
// free GPUs with undo), kube.go (Kube: kube-scheduler's composites),
// kueue.go (Kueue: podset slices, or one flat group), engine.go (Group: the
// tree as composite.Group), measure.go (Outcome, Measure), stats.go
// (Stats, the markdown table).
//
// Rules: pure and deterministic like pkg/sim — no client-go, no clock, no
// randomness but the caller's seeded PCG; ties are broken by domain and
// node order where kube-scheduler breaks them at random. A trace is read
// from a file, so a Spec is validated and bounded (depth, children, pods)
// before anything walks it.
//
// See docs/design/simulator.md, "Hierarchical workloads".
package trees
