package sim

import (
	"cmp"
	"fmt"

	"github.com/gpufabric/gpufabric/pkg/sim/fabric"
)

// Recovery kinds: what a policy does when a hardware failure takes a node
// from under a running gang.
type RecoveryKind int

const (
	// RecoverRestart: the whole gang goes back to the queue (gpufabric
	// today with disruptionMode All).
	RecoverRestart RecoveryKind = iota
	// RecoverInPlace: the lost pod is replaced in the lost node's domain
	// (replaceDomain) as soon as a node there has room, spare nodes
	// included; past Recovery.Timeout, Recovery.OnLoss decides (gpufabric
	// with issue 29's replacement, annotation gpufabric.dev/on-member-loss).
	RecoverInPlace
	// RecoverKueue: Kueue's TASFailedNodeReplacement: a node in the same
	// rack, else in the same block (Recovery.BlockLevel); none: the
	// workload is evicted and requeued at once (fail fast).
	RecoverKueue
	// RecoverAnywhere: plain kube-scheduler: the recreated pod goes to the
	// first node with room anywhere and waits for one; the job is torn
	// down and requeued after Options.Timeout (like a partial gang).
	RecoverAnywhere
)

// OnLoss is the member-loss policy of RecoverInPlace past the bound, as
// the scheduler's --member-loss-policy and gpufabric.dev/on-member-loss.
type OnLoss string

const (
	OnLossWait    OnLoss = "Wait"
	OnLossRestart OnLoss = "Restart"
	OnLossFail    OnLoss = "Fail"
)

// Recovery is a failure policy's recovery.
type Recovery struct {
	Kind RecoveryKind
	// Spares per replacement domain kept from new gangs (RecoverInPlace).
	Spares int
	// Timeout is the replacement bound in seconds (RecoverInPlace).
	Timeout int64
	OnLoss  OnLoss
	// BlockLevel is RecoverKueue's outer level (the baseline's key).
	BlockLevel int
}

// Failure policy names, in report order.
const (
	FailGPUFabricSpares  = "gpufabric-spares"
	FailGPUFabricReplace = "gpufabric-replace"
	FailGPUFabricRestart = "gpufabric-restart"
	FailKueueReplace     = "kueue-tas-replace"
	FailRestartAnywhere  = "kube-restart-anywhere"
)

// FailurePolicyNames are the policies NewFailurePolicy knows.
func FailurePolicyNames() []string {
	return []string{FailGPUFabricSpares, FailGPUFabricReplace, FailGPUFabricRestart, FailKueueReplace, FailRestartAnywhere}
}

// FailurePolicyOptions configure NewFailurePolicy.
type FailurePolicyOptions struct {
	// Key is the Kueue baseline's level (its TAS key and its block);
	// default fabric.LabelLeaf.
	Key string
	// Spares per domain of gpufabric-spares (default DefaultSpares).
	Spares int
	// ReplacementTimeout in seconds (default DefaultReplacementTimeout).
	ReplacementTimeout int64
	// OnLoss of the gpufabric replace policies (default Restart).
	OnLoss OnLoss
}

// Defaults of the failure policies, as the scheduler's flags.
const (
	DefaultSpares             = 1
	DefaultReplacementTimeout = 60
)

// NewFailurePolicy returns a fresh placement policy and its recovery.
func NewFailurePolicy(name string, f *fabric.Fabric, opt FailurePolicyOptions) (Policy, Recovery, error) {
	onLoss := opt.OnLoss
	if onLoss == "" {
		onLoss = OnLossRestart
	}
	if onLoss != OnLossWait && onLoss != OnLossRestart && onLoss != OnLossFail {
		return nil, Recovery{}, fmt.Errorf("member-loss policy %q: want Wait, Restart or Fail", onLoss)
	}
	timeout := opt.ReplacementTimeout
	if timeout <= 0 {
		timeout = DefaultReplacementTimeout
	}
	inPlace := Recovery{Kind: RecoverInPlace, Timeout: timeout, OnLoss: onLoss}
	switch name {
	case FailGPUFabricSpares:
		inPlace.Spares = opt.Spares
		if inPlace.Spares <= 0 {
			inPlace.Spares = DefaultSpares
		}
		return NewEnginePolicy(f), inPlace, nil
	case FailGPUFabricReplace:
		return NewEnginePolicy(f), inPlace, nil
	case FailGPUFabricRestart:
		return NewEnginePolicy(f), Recovery{Kind: RecoverRestart}, nil
	case FailKueueReplace:
		key := cmp.Or(opt.Key, fabric.LabelLeaf)
		p, err := NewPolicy(PolicyBestFit, f, PolicyOptions{Key: key})
		if err != nil {
			return nil, Recovery{}, err
		}
		return p, Recovery{Kind: RecoverKueue, BlockLevel: f.Level(key)}, nil
	case FailRestartAnywhere:
		return firstFit{}, Recovery{Kind: RecoverAnywhere}, nil
	}
	return nil, Recovery{}, fmt.Errorf("unknown failure policy %q", name)
}

// bestNode is the node of nodes with room for gpus GPUs and the least free
// (ties: the lowest index), -1 when none: a late member packed as the
// engine packs.
func (c *Cluster) bestNode(nodes []int, gpus int) int {
	best := -1
	for _, n := range nodes {
		if c.Free[n] >= gpus && (best < 0 || c.Free[n] < c.Free[best]) {
			best = n
		}
	}
	return best
}

// firstNode is the lowest-index node with room for gpus GPUs, -1 when none.
func (c *Cluster) firstNode(gpus int) int {
	for n, free := range c.Free {
		if free >= gpus {
			return n
		}
	}
	return -1
}

// replacement picks the node of a lost pod of gpus GPUs that was on node
// from, by the recovery's rule; -1 when there is none.
func (c *Cluster) replacement(rec Recovery, from, gpus int) int {
	f := c.Fabric
	switch rec.Kind {
	case RecoverInPlace:
		return c.bestNode(f.DomainNodes(f.ReplaceLevel(from), from), gpus)
	case RecoverKueue:
		if n := c.bestNode(f.DomainNodes(max(f.Level(fabric.LabelRack), 0), from), gpus); n >= 0 {
			return n
		}
		return c.bestNode(f.DomainNodes(rec.BlockLevel, from), gpus)
	case RecoverAnywhere:
		return c.firstNode(gpus)
	}
	return -1
}

// hidden is what a new gang may not use: nodes that are down and, with
// spares, the spares of each replacement domain: the (up to) n
// highest-index wholly free nodes (all GPUs free, no existing load), so that a new gang only uses a domain's
// nodes while n wholly free ones remain.
func (c *Cluster) hidden(down []bool, spares int) []bool {
	out := make([]bool, len(c.Free))
	copy(out, down)
	if spares <= 0 {
		return out
	}
	seen := map[[2]int]bool{}
	for n := range c.Free {
		l := c.Fabric.ReplaceLevel(n)
		key := [2]int{l, c.Fabric.DomainOf[l][n]}
		if seen[key] {
			continue
		}
		seen[key] = true
		nodes, kept := c.Fabric.DomainNodes(l, n), 0
		for i := len(nodes) - 1; i >= 0 && kept < spares; i-- {
			m := nodes[i]
			if !down[m] && c.Free[m] == c.Fabric.GPUs[m] && c.Free[m] > 0 {
				out[m] = true
				kept++
			}
		}
	}
	return out
}
