package preemption

import (
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Unit is what one preemption evicts as a whole.
type Unit struct {
	// Key: "pg:<namespace>/<name>" for a PodGroup with disruptionMode All,
	// "cpg:<namespace>/<name>" for a CompositePodGroup with disruptionMode
	// All (every leaf PodGroup under it), "pod:<namespace>/<name>" for a
	// single pod.
	Key      string
	Priority int32
	// Group: the unit is a whole PodGroup, or with Composite a whole
	// CompositePodGroup's subtree.
	Group, Composite bool
	// Pods are the unit's running pods, on any node.
	Pods []*v1.Pod
	// Claims are the allocated claims whose devices are freed when the unit
	// goes: those reserved only by its pods, and for a PodGroup its shared
	// claims.
	Claims []types.UID
	// Start is when the unit's first pod started; GPU-time lost is counted
	// from it. Zero: unknown (nothing lost).
	Start time.Time
	// Budgets counts the unit's pods per PodDisruptionBudget
	// ("<namespace>/<name>") that covers them.
	Budgets map[string]int
}

// moreImportant orders victims: higher priority, then whole composites
// over whole PodGroups over pods, then more pods, then the earlier start,
// then the key (kube-scheduler's MoreImportantVictim, made total).
func moreImportant(a, b *Unit) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if ra, rb := a.rank(), b.rank(); ra != rb {
		return ra > rb
	}
	if len(a.Pods) != len(b.Pods) {
		return len(a.Pods) > len(b.Pods)
	}
	if !a.Start.Equal(b.Start) {
		return !a.Start.IsZero() && (b.Start.IsZero() || a.Start.Before(b.Start))
	}
	return a.Key < b.Key
}

// rank is a unit's kind as kube-scheduler ranks victims: a
// CompositePodGroup 3, a PodGroup 2, a pod 1.
func (u *Unit) rank() int {
	switch {
	case u.Composite:
		return 3
	case u.Group:
		return 2
	}
	return 1
}

// reprieveOrder is the order victims are given back in: units covered by a
// PodDisruptionBudget first (evicting them may be refused), each part most
// important first.
func reprieveOrder(units []*Unit) []*Unit {
	out := append([]*Unit(nil), units...)
	sort.SliceStable(out, func(i, j int) bool {
		bi, bj := len(out[i].Budgets) > 0, len(out[j].Budgets) > 0
		if bi != bj {
			return bi
		}
		return moreImportant(out[i], out[j])
	})
	return out
}

// Cost is what a plan evicts.
type Cost struct {
	// MaxPriority is the highest victim priority.
	MaxPriority int32
	// Units is the number of victim units (a whole PodGroup counts once).
	Units int
	// GPUSeconds is the GPU-time lost: each victim's devices times how long
	// it has run.
	GPUSeconds int64
	// Pods evicted.
	Pods int
	// Devices freed.
	Devices int
}

// less compares costs (see the package rules).
func (c Cost) less(o Cost) bool {
	switch {
	case c.MaxPriority != o.MaxPriority:
		return c.MaxPriority < o.MaxPriority
	case c.Units != o.Units:
		return c.Units < o.Units
	case c.GPUSeconds != o.GPUSeconds:
		return c.GPUSeconds < o.GPUSeconds
	}
	return c.Pods < o.Pods
}
