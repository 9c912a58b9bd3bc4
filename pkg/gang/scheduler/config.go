package scheduler

import (
	"fmt"
	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/membership"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/cost"
	"github.com/gpufabric/gpufabric/pkg/gang/replace"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// DefaultCommitParallelism is Config.CommitParallelism's default.
const DefaultCommitParallelism = 16

// DefaultCommitsInFlight is Config.CommitsInFlight's default.
const DefaultCommitsInFlight = 8

// DefaultStarvationReservationsPerNamespace is
// Config.StarvationReservationsPerNamespace's default.
const DefaultStarvationReservationsPerNamespace = 1

// ReplaceConfig is the replace room's Config (binaries wire rooms only
// through the loop).
type ReplaceConfig = replace.Config

// Config of a Scheduler. Client is required; the zero value of every other
// field is usable.
type Config struct {
	Client kubernetes.Interface
	// RecordNamespace holds the commit records (ConfigMaps only the
	// scheduler's identity may write). Required.
	RecordNamespace string
	// Fence, when set, is called before every write; an error means this
	// replica may no longer hold the Lease: the scheduler stops with
	// gate.ErrFenced. RunWithLeaderElection sets it.
	Fence func() error
	// Tree configures the node-label levels above the NVLink domain.
	Tree topology.TreeConfig
	// DomainChannels is the number of channels per fabric-domain pool. When
	// > 0 the scheduler runs the fabric-domain publisher (pkg/gang/domains)
	// while it leads.
	DomainChannels int
	// FreeRoomInterval, when > 0, makes the leader publish the free-room
	// view (pkg/gang/freeroom: free GPUs per fabric domain for tenants) in
	// RecordNamespace, rewritten when it changed, at most once per
	// interval.
	FreeRoomInterval time.Duration
	// Metrics, when set, receives the scheduler's metrics.
	Metrics *Metrics
	// InitialBackoff and MaxBackoff bound the exponential backoff (with
	// jitter) of an unschedulable gang: it is not retried earlier even when
	// the cluster changes. Defaults 1s and 10s.
	InitialBackoff, MaxBackoff time.Duration
	// MaxUnschedulableWait is how long an unschedulable gang waits for a
	// cluster change that can help before it is retried anyway. Default 60s.
	MaxUnschedulableWait time.Duration
	// MetricsInterval is how often the free-GPU gauges are refreshed.
	// Default 15s.
	MetricsInterval time.Duration
	// CommitParallelism is the number of writes of one commit phase (claim
	// writes, bindings) in flight at once; the phases stay in order.
	// Default 16.
	CommitParallelism int
	// CommitsInFlight is the number of gangs whose commits run at once
	// while the worker places the next gangs (pipelined commits; their
	// decisions are assumed from before the first write). Default 8.
	CommitsInFlight int
	// SerialCommits makes the worker commit each gang before it places the
	// next, as before pipelined commits: the baseline of the benchmarks.
	// No flag.
	SerialCommits bool
	// CompositePodGroups places CompositePodGroup trees
	// (scheduling.k8s.io/v1alpha3, KEP-6012) as one decision each
	// (pkg/gang/composite); the API must be served. Off: a PodGroup with a
	// parent is placed as a flat gang, as kube-scheduler does with the
	// CompositePodGroup gate off.
	CompositePodGroups bool
	// TreePlaceCalls bounds one tree's search (composite.Options.PlaceCalls;
	// 0: its default).
	TreePlaceCalls int
	// DisablePreemption turns preemption off: a gang that does not fit
	// waits for room whatever its priority.
	DisablePreemption bool
	// NominationTimeout bounds a preemption: the nodes held for the gang
	// are released, and it may preempt again, when its victims have not all
	// gone after this long, or when they have gone and the gang still does
	// not fit after min(30s, NominationTimeout). Default 5m.
	NominationTimeout time.Duration
	// PreemptionBudget bounds the wall time of one preemption evaluation.
	// Default 2s.
	PreemptionBudget time.Duration
	// StarvationBound: a gang that has waited longer than this holds the
	// domain closest to fitting it (docs/design/preemption.md); 0 disables.
	StarvationBound time.Duration
	// StarvationReservationsPerNamespace bounds the starving gangs of one
	// namespace that hold a domain at once; the others wait without one.
	// Default DefaultStarvationReservationsPerNamespace.
	StarvationReservationsPerNamespace int
	// Members checks the members of gpufabric-grouper's PodGroups and
	// explains lone pods (pkg/gang/membership); nil admits every pod.
	Members *membership.Guard
	// Replace: how lost members are replaced in place (pkg/gang/replace;
	// zero fields: its defaults).
	Replace replace.Config
	// RebuildSnapshots makes every attempt build its snapshot from the
	// listers, as before the snapshot cache (docs/design/snapshot-cache.md):
	// the baseline of the benchmarks, and a way to rule the cache out when
	// debugging. No flag.
	RebuildSnapshots bool
	// Placement configures the engine; its MatchCache is set by the
	// scheduler, and its Budget's deadline per attempt (PlacementTime).
	Placement placement.Config
	// PlacementTime is one attempt's time budget, plus cost.TimePerMember
	// per member (docs/design/cost.md). Default cost.DefaultTime (1s).
	PlacementTime time.Duration
	// CommitHook, when set, is called before every write of a commit (and
	// recovery) and once after the last write of a commit, with the step
	// and the object. An error aborts the scheduler with gate.ErrAborted and no
	// cleanup: writes of the phase not yet started are skipped, started
	// ones complete. Called concurrently from the writers of one phase.
	// For crash tests.
	CommitHook gate.Hook
	// OnRecovered, when set, is called after recovery and before the first
	// scheduling attempt of a leadership term. For tests.
	OnRecovered func()
	// InformersStarted, when set, is called in every leadership term once
	// its informers started, with a function that names those not synced
	// yet (e.g. "podgroups.v1beta1.scheduling.k8s.io"; none: synced). For
	// readiness checks.
	InformersStarted func(unsynced func() []string)
}

func (c Config) withDefaults() (Config, error) {
	if c.Client == nil {
		return c, fmt.Errorf("config: client is required")
	}
	if msgs := validation.IsDNS1123Label(c.RecordNamespace); len(msgs) > 0 {
		return c, fmt.Errorf("config: record namespace %q: %s", c.RecordNamespace, strings.Join(msgs, "; "))
	}
	if c.DomainChannels < 0 || c.DomainChannels > 128 {
		return c, fmt.Errorf("config: domain channels must be 0..128, got %d", c.DomainChannels)
	}
	if c.CommitParallelism < 0 {
		return c, fmt.Errorf("config: commit parallelism must be >= 0, got %d", c.CommitParallelism)
	}
	if c.CommitParallelism == 0 {
		c.CommitParallelism = DefaultCommitParallelism
	}
	if c.CommitsInFlight < 0 || c.CommitsInFlight > 256 {
		return c, fmt.Errorf("config: commits in flight must be 0..256, got %d", c.CommitsInFlight)
	}
	if c.CommitsInFlight == 0 {
		c.CommitsInFlight = DefaultCommitsInFlight
	}
	if c.InitialBackoff <= 0 {
		c.InitialBackoff = time.Second
	}
	if c.MaxBackoff < c.InitialBackoff {
		c.MaxBackoff = max(10*time.Second, c.InitialBackoff)
	}
	if c.MaxUnschedulableWait <= 0 {
		c.MaxUnschedulableWait = time.Minute
	}
	if c.NominationTimeout <= 0 {
		c.NominationTimeout = 5 * time.Minute
	}
	if c.PlacementTime <= 0 {
		c.PlacementTime = cost.DefaultTime
	}
	if c.PreemptionBudget <= 0 {
		c.PreemptionBudget = 2 * time.Second
	}
	if c.StarvationBound < 0 {
		return c, fmt.Errorf("config: starvation bound must be >= 0, got %s", c.StarvationBound)
	}
	if c.StarvationReservationsPerNamespace < 0 {
		return c, fmt.Errorf("config: starvation reservations per namespace must be >= 0, got %d", c.StarvationReservationsPerNamespace)
	}
	if c.StarvationReservationsPerNamespace == 0 {
		c.StarvationReservationsPerNamespace = DefaultStarvationReservationsPerNamespace
	}
	var err error
	if c.Replace, err = c.Replace.WithDefaults(); err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	if c.MetricsInterval <= 0 {
		c.MetricsInterval = 15 * time.Second
	}
	return c, nil
}
