// Package membership decides whether a pod that names a PodGroup
// gpufabric-grouper made for a workload really belongs to that workload,
// and what to tell a pod placed alone that belongs to a grouped workload.
//
// A pod names its group by name (spec.schedulingGroup.podGroupName) and
// any pod of the namespace may name any group: upstream has no ownership
// check. gpufabric-grouper marks its PodGroups with the UID of the object
// every member's controller chain must lead to
// (vocab.AnnotationMemberOwnerUID: the workload, or the controller of a
// scheduler-plugins or Volcano PodGroup). The scheduler's loop asks Admit
// for every member of such a group: a pod whose controller references
// (pod → Job → JobSet; pod → StatefulSet → leader pod → StatefulSet →
// LeaderWorkerSet; pod → RayCluster) do not lead there, within MaxHops, is
// not a member: it is not placed nor counted, and gets one Warning
// NotGroupMember. Hint tells a pod without a group that is controlled by
// a grouped workload (its labels renamed by a new controller version, or
// removed) that it is placed alone, and why; otherwise pkg/gang/gangless
// answers.
//
// Rules:
//   - Owners is the only state: metadata-only informers of Jobs,
//     StatefulSets, LeaderWorkerSet leader pods (label selected) and the
//     grouper's PodGroups; each object found must have the UID the
//     reference names.
//   - Before Owners synced, Admit admits (the loop must not stall at
//     start); afterwards an owner it cannot find is refused. A pod
//     younger than OwnerGrace whose chain ends at such an owner is
//     refused without an event and looked at again (the informers may lag
//     the controller that made the pod): a real member is placed once its
//     owner is seen, a forged chain is warned after the grace.
//   - Bounded: MaxHops lookups per pod; one event per pod (a bounded set
//     of the pods warned); messages quote tenant values cut.
//   - A nil *Guard admits every pod and hints as gangless does.
//
// Limits (docs/design/security.md): ownerReferences are written by
// whoever creates the pod; a tenant who may create pods in the namespace
// and reads the Job's UID can forge the chain. The guard stops pods that
// merely carry a workload's labels or name its group, not a forged chain.
//
// Files: membership.go (Guard: Admit, Hint), owners.go (Owners: the
// informers and the chain lookups).
package membership
