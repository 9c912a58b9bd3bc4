package inspect

import (
	"time"
)

// The report models. They are what `-o json` and `-o yaml` print, so the
// field names are part of the plugin's interface: add fields, do not rename
// them.

// GPUCounts counts GPUs: Total = Used + Tainted + Free.
type GPUCounts struct {
	Total   int `json:"total"`
	Used    int `json:"used"`
	Tainted int `json:"tainted"`
	Free    int `json:"free"`
}

// ChannelCounts counts fabric-domain channels.
type ChannelCounts struct {
	Total int `json:"total"`
	Used  int `json:"used"`
}

// Gang kinds.
const (
	KindPodGroup = "PodGroup"
	KindPod      = "Pod"
	KindClaim    = "ResourceClaim"
)

// GangRef names what holds devices: a PodGroup, a pod without PodGroup, or
// a claim reserved for nobody.
type GangRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Job is the Job whose pods form the gang (their job-name label).
	Job string `json:"job,omitempty"`
}

// GangUse is what one gang holds in a domain.
type GangUse struct {
	GangRef
	GPUs     int `json:"gpus"`
	Channels int `json:"channels,omitempty"`
}

// StatusReport is the occupancy of the fabric, level by level.
type StatusReport struct {
	// Levels: the NVLink domain, then each --topology-levels key.
	Levels []LevelStatus `json:"levels"`
	// Cluster sums every node.
	Cluster DomainStatus `json:"cluster"`
	// Spares per domain, when the scheduler keeps them.
	Spares *SparesStatus `json:"spares,omitempty"`
	// Waiting lists the PodGroups not placed yet.
	Waiting []WaitingGang `json:"waiting,omitempty"`
	// Warnings from building the fabric tree (e.g. a node whose GPUs
	// disagree on their NVLink domain).
	Warnings []string `json:"warnings,omitempty"`
}

// LevelStatus is one level of the fabric tree.
type LevelStatus struct {
	Key     string         `json:"key"`
	Domains []DomainStatus `json:"domains"`
	// NodesWithoutGPUs counts nodes of this level's domains that publish no
	// GPU (their domains are left out); NodesWithoutLabel the nodes that do
	// not carry a label level's key.
	NodesWithoutGPUs  int `json:"nodesWithoutGPUs,omitempty"`
	NodesWithoutLabel int `json:"nodesWithoutLabel,omitempty"`
}

// DomainStatus is the occupancy of one domain.
type DomainStatus struct {
	ID       string        `json:"id"`
	Nodes    int           `json:"nodes"`
	GPUs     GPUCounts     `json:"gpus"`
	Channels ChannelCounts `json:"channels"`
	// Gangs holding GPUs or channels here, most GPUs first.
	Gangs []GangUse `json:"gangs,omitempty"`
}

// WaitingGang is a PodGroup without PodGroupInitiallyScheduled=True.
type WaitingGang struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Job       string `json:"job,omitempty"`
	// Position in the scheduler's queue order among the waiting PodGroups
	// listed (1 is served first): priority, then older first, then key.
	Position int `json:"position"`
	// Priority: the PodGroup's spec.priority, else its lowest pending
	// member's, as the scheduler ranks it.
	Priority int32 `json:"priority"`
	// Created is the PodGroup's creation time (its age in the queue).
	Created time.Time `json:"created"`
	// Reason of the condition, or WaitingForMembers / Pending without one.
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// NodesReport lists the nodes that publish devices of gpufabric.dev.
type NodesReport struct {
	// Levels are the --topology-levels keys, the order of NodeInfo.Levels.
	Levels []string   `json:"levels,omitempty"`
	Nodes  []NodeInfo `json:"nodes"`
	// OtherNodes counts nodes without devices of gpufabric.dev.
	OtherNodes int `json:"otherNodes,omitempty"`
}

// NodeInfo is one node's devices and taints.
type NodeInfo struct {
	Name         string    `json:"name"`
	NVLinkDomain string    `json:"nvlinkDomain,omitempty"`
	Levels       []string  `json:"levels,omitempty"`
	GPUs         GPUCounts `json:"gpus"`
	// Models are the GPUs' distinct productName values.
	Models       []string      `json:"models,omitempty"`
	GPURails     []int64       `json:"gpuRails,omitempty"`
	NICs         []NICInfo     `json:"nics,omitempty"`
	DeviceTaints []DeviceTaint `json:"deviceTaints,omitempty"`
	// NodeTaints as key=value:effect.
	NodeTaints    []string `json:"nodeTaints,omitempty"`
	Unschedulable bool     `json:"unschedulable,omitempty"`
}

// NICInfo is one NIC device.
type NICInfo struct {
	Name      string `json:"name"`
	Rail      *int64 `json:"rail,omitempty"`
	PortState string `json:"portState,omitempty"`
	RateGbps  int64  `json:"rateGbps,omitempty"`
}

// DeviceTaint is one taint and the devices of a node that carry it.
type DeviceTaint struct {
	Key     string   `json:"key"`
	Value   string   `json:"value,omitempty"`
	Effect  string   `json:"effect"`
	Devices []string `json:"devices"`
}

// PodGroup states.
const (
	StatePlaced      = "Placed"
	StateMembersLost = "MembersLost"
	StateFailed      = "Failed"
	StateWaiting     = "Waiting"
	StateDeleting    = "Deleting"
	StateNotFound    = "NotFound"
)

// ExplainReport says where a gang went or why it waits.
type ExplainReport struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	State     string `json:"state"`
	// Summary is one line: how many members are bound, pending, gated.
	Summary     string `json:"summary"`
	MinCount    int32  `json:"minCount,omitempty"`
	TopologyKey string `json:"topologyKey,omitempty"`
	// Segments are the PodGroup's hard segments ("16 members each in one
	// gpufabric.dev/nvlinkDomain"), or why its segment annotations are
	// invalid; where the segments went is in the InitiallyScheduled
	// condition's message.
	Segments string `json:"segments,omitempty"`
	Job      string `json:"job,omitempty"`
	// Workload is the reference the PodGroup was found through
	// ("job/llm-train"); "" when it was named directly.
	Workload string `json:"workload,omitempty"`
	// Tree outlines the CompositePodGroup tree the PodGroup was found
	// through, a line per group.
	Tree []string `json:"tree,omitempty"`
	// Queue is the PodGroup's place among the waiting PodGroups of its
	// namespace (state Waiting only).
	Queue *QueuePlace `json:"queue,omitempty"`
	// Levels are the keys of MemberInfo.Placement: the NVLink domain, then
	// the --topology-levels keys.
	Levels       []string     `json:"levels"`
	Conditions   []Condition  `json:"conditions,omitempty"`
	Members      []MemberInfo `json:"members,omitempty"`
	SharedClaims []ClaimInfo  `json:"sharedClaims,omitempty"`
	Events       []EventInfo  `json:"events,omitempty"`
	Warnings     []string     `json:"warnings,omitempty"`
}

// ExplainList is what explain prints for a workload with more than one
// PodGroup: one report per PodGroup, by name.
type ExplainList struct {
	Items []*ExplainReport `json:"items"`
}

// QueuePlace is a waiting PodGroup's place in the scheduler's order.
type QueuePlace struct {
	Position int `json:"position"`
	// Of is how many waiting PodGroups were counted.
	Of       int       `json:"of"`
	Priority int32     `json:"priority"`
	Created  time.Time `json:"created"`
}

// Condition is a PodGroup condition.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// MemberInfo is one pod of the gang (or, when the PodGroup does not exist,
// one pod that names it).
type MemberInfo struct {
	// Rank from the workload's index labels, else the pod name's numeric
	// suffix; "" when none.
	Rank string `json:"rank,omitempty"`
	Pod  string `json:"pod"`
	Node string `json:"node,omitempty"`
	// Placement: the node's domain at each of ExplainReport.Levels.
	Placement []string `json:"placement,omitempty"`
	Phase     string   `json:"phase"`
	// Devices of the pod's own claims, as pool/device.
	Devices []string `json:"devices,omitempty"`
	Rails   []int64  `json:"rails,omitempty"`
	// Gates are the pod's scheduling gates.
	Gates []string `json:"gates,omitempty"`
	// Scheduled is the PodScheduled condition.
	Scheduled *Condition `json:"scheduled,omitempty"`
}

// ClaimInfo is one of the PodGroup's shared claims.
type ClaimInfo struct {
	// Name is the claim's name; "" when it is not created yet.
	Name  string `json:"name"`
	Entry string `json:"entry"`
	// Devices as pool/device; none while not allocated.
	Devices     []string `json:"devices,omitempty"`
	ReservedFor []string `json:"reservedFor,omitempty"`
}

// EventInfo is an events.k8s.io event about the PodGroup.
type EventInfo struct {
	Type     string    `json:"type"`
	Reason   string    `json:"reason"`
	Action   string    `json:"action,omitempty"`
	Note     string    `json:"note"`
	Count    int32     `json:"count"`
	LastSeen time.Time `json:"lastSeen"`
	From     string    `json:"from,omitempty"`
}

// GroupSummary lists PodGroups (explain without a name).
type GroupSummary struct {
	Groups []GroupLine `json:"podGroups"`
}

// GroupLine is one PodGroup of a GroupSummary.
type GroupLine struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	State     string `json:"state"`
	Job       string `json:"job,omitempty"`
	MinCount  int32  `json:"minCount,omitempty"`
	Members   int    `json:"members"`
	Bound     int    `json:"bound"`
	Gated     int    `json:"gated,omitempty"`
	// Domains are the NVLink domains of the bound members.
	Domains []string `json:"domains,omitempty"`
	Reason  string   `json:"reason,omitempty"`
	Message string   `json:"message,omitempty"`
}
