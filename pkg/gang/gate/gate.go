// Package gate is the check every write of gpufabric-scheduler passes
// before it starts: the commit protocol's, recovery's, preemption's and the
// double-allocation guard's. A write may start only while this replica is
// sure to hold the Lease (the fence), no earlier write has stopped the
// scheduler, and the test hook (crash tests) lets it.
//
// Rules:
//   - Call Gate.Check immediately before each write, never once for many.
//   - An error wrapping ErrAborted or ErrFenced stops the scheduler at once,
//     without undoing anything (Stops reports it): the next leader's
//     recovery finishes or rolls back what is left.
//   - The zero Gate lets every write through.
package gate

import (
	"errors"
	"fmt"
)

// ErrAborted wraps the error of a Hook: the scheduler stops at once,
// without cleaning up, as if the process had been killed.
var ErrAborted = errors.New("scheduler aborted by commit hook")

// ErrFenced wraps the error of a Fence: this replica may have lost the
// Lease, so the scheduler stops at once without writing or undoing anything
// (the next leader's recovery finishes or rolls back what it left).
var ErrFenced = errors.New("fenced: not sure to hold the Lease")

// Step names one kind of write of the commit protocol.
type Step string

// The steps of a commit, in order, and the other writes.
const (
	StepRecord         Step = "record"
	StepClaimFinalizer Step = "claim-finalizer"
	StepClaimStatus    Step = "claim-status"
	StepBind           Step = "bind"
	StepCondition      Step = "condition"
	StepClearRecord    Step = "clear-record"
	// StepEvict evicts a pod: a preemption victim, or the pod of a claim
	// that lost a device allocated twice (repair).
	StepEvict Step = "evict"
	// StepNominate writes a nomination record (before the first eviction
	// of a preemption); StepClearNomination deletes it.
	StepNominate        Step = "nominate"
	StepClearNomination Step = "clear-nomination"
	// StepExtendedClaim creates a pod's special claim for its extended
	// resources backed by DRA, or deletes one that asks for other devices
	// (pkg/gang/extres), before the gang is placed; StepPodStatus writes a
	// placed pod's status.extendedResourceClaimStatus (before its
	// binding).
	StepExtendedClaim Step = "extended-claim"
	StepPodStatus     Step = "pod-status"
	// StepDone is reported after the last write; aborting there leaves a
	// complete commit.
	StepDone Step = "done"
)

// Hook is called before every write (and once after the last write of a
// commit, with StepDone) with the step and the object; an error aborts the
// scheduler. Called concurrently from the writers of one phase. For crash
// tests.
type Hook func(step Step, object string) error

// Gate checks that a write may start. Its fields are set once, before the
// first Check; Check is safe for concurrent use.
type Gate struct {
	// Stopped, when set, returns the error that stopped the scheduler
	// (another commit's abort or fence), nil while it runs.
	Stopped func() error
	// Fence, when set, returns an error when this replica may no longer
	// hold the Lease.
	Fence func() error
	// Hook, when set, is the crash tests' hook.
	Hook Hook
}

// Check returns nil when the write (step, object) may start, or an error
// saying why not: the scheduler's stop error, one wrapping ErrFenced, or
// one wrapping ErrAborted.
func (g *Gate) Check(step Step, object string) error {
	if g.Stopped != nil {
		if err := g.Stopped(); err != nil {
			// Another commit stopped the scheduler: no write starts after it.
			return fmt.Errorf("before %s %s: %w", step, object, err)
		}
	}
	if err := g.Fenced(); err != nil {
		return fmt.Errorf("%w: before %s %s: %w", ErrFenced, step, object, err)
	}
	if g.Hook == nil {
		return nil
	}
	if err := g.Hook(step, object); err != nil {
		return fmt.Errorf("%w at %s %s: %w", ErrAborted, step, object, err)
	}
	return nil
}

// Fenced returns the Fence's error, nil when there is no Fence or it holds.
func (g *Gate) Fenced() error {
	if g.Fence == nil {
		return nil
	}
	return g.Fence()
}

// Stops reports whether err must stop the scheduler without undoing
// anything: a hook abort (a simulated crash) or a lost Lease.
func Stops(err error) bool { return errors.Is(err, ErrAborted) || errors.Is(err, ErrFenced) }
