// Package vocab is the one vocabulary of what gpufabric-scheduler writes to
// the API: PodGroup condition types and reasons, pod reasons, event
// reasons, the names and labels of the objects it keeps in its own
// namespace (commit records, nomination records, device holds), and the
// gang keys its nomination records hold. The scheduler writes these words,
// pkg/inspect reads them back, and the chart (its admission policy names
// the record prefixes) is tested against them.
//
// Rules:
//   - A word the scheduler writes is declared here once; no other package
//     spells it again as a literal.
//   - Changing a value is an API change for users (kubectl, alerts, scripts):
//     values never change once released.
//   - This package imports nothing of gpufabric's but pkg/topology.
package vocab

import (
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"

	"github.com/gpufabric/gpufabric/pkg/topology"
)

// PodGroup conditions.
const (
	// ConditionInitiallyScheduled is upstream's PodGroupInitiallyScheduled:
	// False while the gang waits (with one of the reasons below), True once
	// it was placed; terminal once True.
	ConditionInitiallyScheduled = schedulingv1beta1.PodGroupInitiallyScheduled
	// ConditionMembersLost is True on a placed PodGroup while fewer of its
	// members run than it had: pods deleted, evicted, failed, or on a node
	// that was deleted. It goes back to False when enough members run again.
	ConditionMembersLost = topology.DriverName + "/MembersLost"
	// ConditionFailed is True on a PodGroup the scheduler gave up on
	// (reason ReasonNoReplacement: a lost member found no replacement
	// within its bound and the PodGroup's policy is Fail): its members are
	// evicted and nothing of it is placed again until it is recreated.
	ConditionFailed = topology.DriverName + "/Failed"
)

// Replace in place (docs/design/health.md): the PodGroup annotations that
// choose what happens when a member is lost, and their values.
const (
	// AnnotationOnMemberLoss: PolicyWait, PolicyRestart or PolicyFail
	// (default: the scheduler's --member-loss-policy).
	AnnotationOnMemberLoss = topology.DriverName + "/on-member-loss"
	// AnnotationReplacementTimeout: a Go duration, 0s..1h, the bound on
	// a lost member's replacement (default: --replacement-timeout).
	AnnotationReplacementTimeout = topology.DriverName + "/replacement-timeout"
	PolicyWait                   = "Wait"
	PolicyRestart                = "Restart"
	PolicyFail                   = "Fail"
)

// Reasons of ConditionInitiallyScheduled.
const (
	// ReasonScheduled: the gang was placed (status True).
	ReasonScheduled = "Scheduled"
	// ReasonUnschedulable: the gang does not fit (or a member uses a pod
	// feature the engine does not model); the message says why.
	ReasonUnschedulable = schedulingv1beta1.PodGroupReasonUnschedulable
	// ReasonSchedulerError: the attempt failed for a reason of the
	// scheduler's own (an informer, the engine).
	ReasonSchedulerError = schedulingv1beta1.PodGroupReasonSchedulerError
	// ReasonWaitingForMembers: fewer than minCount members (or their
	// claims) exist yet; also the event reason that says so.
	ReasonWaitingForMembers = "WaitingForMembers"
	// ReasonTimedOut: the placement attempt spent its budget (allocator
	// calls, time), or the claims' Allocate calls ran out of time; the
	// message starts with "timed out" and names the claim (its
	// namespace-local name, cut) whose selectors cost the most. The gang
	// backs off harder than an unschedulable one.
	ReasonTimedOut = "TimedOut"
)

// Reasons of ConditionMembersLost, and of the restart of a whole gang.
const (
	ReasonMembersLost       = "MembersLost"
	ReasonAllMembersRunning = "AllMembersRunning"
	// ReasonReplacingInPlace: a member was lost to a trigger (its node
	// NotReady past the grace, an untolerated NoExecute taint, its node
	// deleted, the pod failed); its replacement is placed in the gang's
	// domain when its controller recreates it.
	ReasonReplacingInPlace = "ReplacingInPlace"
	// ReasonReplacedInPlace: the replacements run in the gang's domain
	// (status False).
	ReasonReplacedInPlace = "ReplacedInPlace"
	// ReasonNoReplacement: the replacement bound passed with no
	// replacement placed: on ConditionMembersLost with policy Wait (it
	// keeps waiting), on ConditionFailed with policy Fail.
	ReasonNoReplacement = "NoReplacement"
	// ReasonMemberDisrupted: a member was deleted by a taint manager and
	// the gang is being restarted whole.
	ReasonMemberDisrupted = "MemberDisrupted"
	// ReasonReplacingMembers: the old members are gone and the shared
	// claims released; the members the controller creates again are placed
	// as a new gang.
	ReasonReplacingMembers = "ReplacingMembers"
	// ReasonGangRestarted: the restarted gang runs again.
	ReasonGangRestarted = "GangRestarted"
	// ReasonPreemptionByScheduler is the reason of the DisruptionTarget
	// condition on preemption victims (pods we schedule, and whole
	// PodGroups).
	ReasonPreemptionByScheduler = schedulingv1beta1.PodGroupReasonPreemptionByScheduler
)

// Reasons of a pod's PodScheduled condition besides the core ones.
const (
	// ReasonPodGroupNotFound: the pod names a PodGroup that does not exist
	// (not created yet, or deleted).
	ReasonPodGroupNotFound = "PodGroupNotFound"
)

// Event reasons.
const (
	EventFailedScheduling = "FailedScheduling"
	EventScheduled        = "Scheduled"
	// EventCommitRecordRejected: recovery found a commit record it cannot
	// trust and removed it without acting on it.
	EventCommitRecordRejected = "CommitRecordRejected"
	// EventCommitRolledBack / EventCommitRecovered: recovery rolled back or
	// finished a half-done commit.
	EventCommitRolledBack = "CommitRolledBack"
	EventCommitRecovered  = "CommitRecovered"
	// EventDeviceDoubleBooked: a device was allocated to two claims (by
	// another scheduler); this pod or claim lost it and is evicted or
	// released.
	EventDeviceDoubleBooked = "DeviceDoubleBooked"
	// EventPreferenceIgnored: a preference of the PodGroup (a preferred
	// topology key no node carries) could not be used; the gang was placed
	// without it.
	EventPreferenceIgnored = "PreferenceIgnored"
	// EventMembersLost / EventMembersRestored go with ConditionMembersLost's
	// transitions.
	EventMembersLost     = "MembersLost"
	EventMembersRestored = "MembersRestored"
	// EventPreempting: on the preemptor, what it evicts and where it goes.
	EventPreempting = "Preempting"
	// EventPreempted: on each victim (pod, and a whole PodGroup), naming the
	// preemptor.
	EventPreempted = "Preempted"
	// EventPreemptionBlocked: an eviction was refused (a
	// PodDisruptionBudget); the preemption ends.
	EventPreemptionBlocked = "PreemptionBlocked"
	// EventRestartBlocked: a PodDisruptionBudget refused the evictions of
	// a whole-gang restart; it is retried with backoff.
	EventRestartBlocked = "RestartBlocked"
	// EventReserved: a gang past the starvation bound holds a domain.
	EventReserved = "Reserved"
	// EventGangRestart is the PodGroup's event when its restart starts.
	EventGangRestart = "GangRestart"
	// EventReplacingInPlace: a member was lost to a trigger and is being
	// replaced in place; EventReplacedInPlace: its replacement runs;
	// EventNoReplacement: the bound passed (policy Wait or Fail says
	// what follows); EventGangFailed: the PodGroup failed (policy Fail);
	// EventInvalidAnnotation: an annotation's value was refused and the
	// default used.
	EventReplacingInPlace  = "ReplacingInPlace"
	EventReplacedInPlace   = "ReplacedInPlace"
	EventNoReplacement     = "NoReplacement"
	EventGangFailed        = "GangFailed"
	EventInvalidAnnotation = "InvalidAnnotation"
	// EventNodeFabricRefused: on a Node whose slices declare an NVLink
	// domain its admin label contradicts (or lacks, when required): nothing
	// is placed on it (docs/topology-labels.md).
	EventNodeFabricRefused = "FabricDomainRefused"
	// EventPriorityCapped: the PodGroup is ranked below the priority it asks
	// for (its PriorityClass's value, or what its pods were admitted with).
	EventPriorityCapped = "PriorityCapped"
	// EventPlacedWithoutGang: a Warning on a pod that names no PodGroup
	// but looks like part of a gang (another gang API names it, or a
	// multi-pod controller made it): it is placed alone, and the event
	// says what to change (pkg/gang/gangless).
	EventPlacedWithoutGang = "PlacedWithoutGang"
	// EventNotGroupMember: a Warning on a pod that names a PodGroup
	// gpufabric-grouper made for a workload, but whose controller chain
	// does not lead to that workload: it is not placed as a member
	// (pkg/gang/membership).
	EventNotGroupMember = "NotGroupMember"
)

// The marks of the groups gpufabric-grouper makes (pkg/workloads/grouping
// writes them, pkg/gang/membership reads them).
const (
	// LabelManagedBy = ManagedByGrouper on its Workloads, PodGroups and
	// CompositePodGroups.
	LabelManagedBy   = "app.kubernetes.io/managed-by"
	ManagedByGrouper = "gpufabric-grouper"
	// AnnotationMemberOwnerUID on such a PodGroup: the UID every member's
	// controller chain must lead to (the workload, or a scheduler-plugins or
	// Volcano PodGroup's controller).
	AnnotationMemberOwnerUID = topology.DriverName + "/member-owner-uid"
)

// The objects the scheduler keeps in its record namespace.
const (
	// RecordPrefix starts the name of every commit record (a ConfigMap).
	RecordPrefix = "gpufabric-commit-"
	// LabelCommitRecord marks commit records ("true").
	LabelCommitRecord = topology.DriverName + "/commit-record"
	// LabelCommitRecordPart marks the further parts of a commit record too
	// large for one object (RecordPartName); its value is the record's
	// generation.
	LabelCommitRecordPart = topology.DriverName + "/commit-record-part"
	// NominationPrefix starts the name of every nomination record (a
	// ConfigMap).
	NominationPrefix = "gpufabric-nomination-"
	// LabelNomination marks nomination records ("true").
	LabelNomination = topology.DriverName + "/nomination"
	// HoldPrefix starts every device hold's name (a ResourceClaim).
	HoldPrefix = "gpufabric-hold-"
	// HoldLabel marks a hold claim; its value is the UID of the claim it is
	// for.
	HoldLabel = topology.DriverName + "/device-hold"
	// HoldForAnnotation names the claim a hold is for (namespace/name).
	HoldForAnnotation = topology.DriverName + "/hold-for"
)

// RecordName is the name of the commit record of the PodGroup (or pod)
// with uid.
func RecordName(uid types.UID) string { return RecordPrefix + string(uid) }

// RecordPartName is the name of part i (1, 2, …) of generation gen of the
// commit record named record: "<record>.<gen>.<i>". The parts of one
// record share its prefix, so the chart's admission policy covers them.
func RecordPartName(record, gen string, i int) string {
	return record + "." + gen + "." + strconv.Itoa(i)
}

// NominationName is the name of the nomination record of the gang with
// uid.
func NominationName(uid types.UID) string { return NominationPrefix + string(uid) }

// Gang keys name a gang in the scheduler's queue and in the nomination
// records it writes (the preemptor, and each victim's unit): a PodGroup is
// "pg:<namespace>/<name>", a pod without one (a gang of one, or a victim
// unit of one pod) "pod:<namespace>/<name>", a CompositePodGroup tree (its
// root) "cpg:<namespace>/<name>".
const (
	PodGroupKeyPrefix  = "pg:"
	PodKeyPrefix       = "pod:"
	CompositeKeyPrefix = "cpg:"
)

// CompositeKey is the key of the tree under the root CompositePodGroup
// namespace/name.
func CompositeKey(namespace, name string) string {
	return CompositeKeyPrefix + namespace + "/" + name
}

// IsCompositeKey reports whether key is a tree's.
func IsCompositeKey(key string) bool { return strings.HasPrefix(key, CompositeKeyPrefix) }

// PodGroupKey is the key of the PodGroup namespace/name.
func PodGroupKey(namespace, name string) string { return PodGroupKeyPrefix + namespace + "/" + name }

// PodKey is the key of the pod namespace/name.
func PodKey(namespace, name string) string { return PodKeyPrefix + namespace + "/" + name }

// SplitKey returns whether a key is a PodGroup's, and its namespace and
// name (a tree's key is no PodGroup's: IsCompositeKey).
func SplitKey(key string) (isGroup bool, namespace, name string) {
	rest, isGroup := strings.CutPrefix(key, PodGroupKeyPrefix)
	if !isGroup {
		rest = strings.TrimPrefix(strings.TrimPrefix(key, PodKeyPrefix), CompositeKeyPrefix)
	}
	namespace, name, _ = strings.Cut(rest, "/")
	return isGroup, namespace, name
}
