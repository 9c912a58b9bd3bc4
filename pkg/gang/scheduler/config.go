package scheduler

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// ErrAborted wraps the error of a CommitHook: the scheduler stops at once,
// without cleaning up, as if the process had been killed.
var ErrAborted = errors.New("scheduler aborted by commit hook")

// DefaultCommitParallelism is Config.CommitParallelism's default.
const DefaultCommitParallelism = 16

// Config of a Scheduler. Client is required; the zero value of every other
// field is usable.
type Config struct {
	Client kubernetes.Interface
	// Tree configures the node-label levels above the NVLink domain.
	Tree topology.TreeConfig
	// DomainChannels is the number of channels per fabric-domain pool. When
	// > 0 the scheduler runs the fabric-domain publisher (pkg/gang/domains)
	// while it leads.
	DomainChannels int
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
	// Placement configures the engine; its MatchCache is set by the
	// scheduler.
	Placement placement.Config
	// CommitHook, when set, is called before every write of a commit (and
	// recovery) and once after the last write of a commit, with the step
	// and the object. An error aborts the scheduler with ErrAborted and no
	// cleanup: writes of the phase not yet started are skipped, started
	// ones complete. Called concurrently from the writers of one phase.
	// For crash tests.
	CommitHook func(step Step, object string) error
	// OnRecovered, when set, is called after recovery and before the first
	// scheduling attempt of a leadership term. For tests.
	OnRecovered func()
}

// Step names one kind of write of the commit protocol.
type Step string

// The steps of a commit, in order.
const (
	StepIntent         Step = "intent"
	StepClaimFinalizer Step = "claim-finalizer"
	StepClaimStatus    Step = "claim-status"
	StepBind           Step = "bind"
	StepCondition      Step = "condition"
	StepClearIntent    Step = "clear-intent"
	// StepDone is reported after the last write; aborting there leaves a
	// complete commit.
	StepDone Step = "done"
)

func (c Config) withDefaults() (Config, error) {
	if c.Client == nil {
		return c, fmt.Errorf("config: client is required")
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
	if c.InitialBackoff <= 0 {
		c.InitialBackoff = time.Second
	}
	if c.MaxBackoff < c.InitialBackoff {
		c.MaxBackoff = max(10*time.Second, c.InitialBackoff)
	}
	if c.MaxUnschedulableWait <= 0 {
		c.MaxUnschedulableWait = time.Minute
	}
	if c.MetricsInterval <= 0 {
		c.MetricsInterval = 15 * time.Second
	}
	return c, nil
}
