// Package peer holds the scale benchmarks of gpufabric-scheduler on a real
// control plane with kwok nodes: side by side with kube-scheduler on the
// same nodes (BenchmarkPeer, `make bench-peer`, CompositePodGroup trees
// among its workloads; the fill and churn traces
// BenchmarkPeerFill and BenchmarkPeerChurn, `make bench-peer-traces`), with
// the API floor of each shape, CPU profiles and per-gang timelines from the
// scheduler's log; and alone (BenchmarkGang512, BenchmarkSmallGangs).
// Results are in docs/benchmarks.md. Its two tests, cheap and without a
// control plane: TestGangTimeline checks the timeline parser,
// TestTreeObjects the trees' objects.
package peer
