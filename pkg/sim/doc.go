// Package sim is gpufabric's placement simulator: it replays a trace of gang
// arrivals and departures on a fabric, once per placement policy, each
// policy on its own copy of the cluster state, and reports what each policy
// achieved.
//
// Files: trace.go (trace generation, save and load), cluster.go (the
// simulator's cluster state), baselines.go (pod-by-pod first fit, kube-scheduler topology-aware
// workload scheduling, Kueue TAS BestFit), engine.go (the gpufabric
// placement engine as a policy), sim.go (the discrete-event loop),
// metrics.go (per-policy results), report.go (markdown table), svg.go
// (the occupancy chart's lines; the leaf pkg/sim/chart draws it), reserve.go (gpufabric-reserve: starvation
// reservations as a policy), sizes.go (the large-gang table by gang size),
// recovery.go (the failure policies: replacement rules, spares),
// goodput.go (failure runs: failures, replacements, restarts, work kept),
// goodput_report.go (per-policy goodput and its table), engine_replace.go
// (the engine policy's hidden nodes and moved pods), treejobs.go (runs with
// tree jobs: GPUs tracked by position, tree metrics). The failure model
// (rates, schedule, checkpoint arithmetic) is pkg/sim/failures; tree jobs
// (shapes, the baselines' tree rules, metrics) are pkg/sim/trees, the
// clusters (generated, fabric files, their indexes) pkg/sim/fabric: a tree
// job is placed whole by every gang policy (the engine as one
// composite.Place decision), pod by pod by first fit.
//
// Rules: pure and deterministic — no client-go, no clocks except to measure
// decision latency, no randomness except the seeded PCGs of the trace
// generator and the failure schedule.
//
// See docs/design/simulator.md.
package sim
