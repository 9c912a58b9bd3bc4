// Package grouping maps the workloads users run (JobSet, LeaderWorkerSet,
// RayCluster, Indexed Jobs, and the PodGroups of scheduler-plugins and
// Volcano) to the gangs gpufabric-scheduler places: a Plan of groups with
// names, minCount, topology key, segment options and shared claims, and
// the scheduling.k8s.io objects (Workload, PodGroups, CompositePodGroups)
// that materialize it, owned by the workload. docs/design/workload-grouping.md
// says why each controller maps the way it does.
//
// It is also the one source of truth of how a pod names its group: the
// pod-side rules (PodRules, GroupOfPod) generate the MutatingAdmissionPolicy
// the chart ships (PodGroupPolicy), and the grouper (pkg/workloads/grouper)
// creates exactly the groups those rules name.
//
// Rules:
//   - Pure: objects in, plan out; no client, no clock. Workloads are read
//     as unstructured objects decoded into minimal structs of the fields
//     used here; the controllers' Go modules are not imported.
//   - Names are deterministic and never collide: a kind prefix and the
//     workload's parts joined by "." (DNS labels and label values, which
//     have no dots where parts meet). A name that is not a DNS subdomain
//     groups nothing (the pods name no group) and is a Problem.
//   - A workload's gpufabric.dev annotations are validated here as the
//     scheduler would; anything wrong is a Problem that names the
//     annotation, and a plan with problems is not created at all: nothing
//     is grouped wrongly, and the pods wait for their group.
//   - Bounded: at most MaxGroups groups per workload, MaxGangSize pods per
//     gang; values a tenant wrote are quoted cut to 64 bytes in messages.
//
// Files: names.go (PodRules, GroupOfPod), policy.go (the admission
// policies generated from the rules), kinds.go (the supported kinds),
// mapping.go (PlanFor, Input), options.go (the workload annotations),
// plan.go (Plan, Group, Problem), objects.go (the API objects of a plan),
// jobset.go (JobSet, Indexed Job), lws.go (LeaderWorkerSet), ray.go
// (RayCluster), foreign.go (scheduler-plugins and Volcano PodGroups).
package grouping
