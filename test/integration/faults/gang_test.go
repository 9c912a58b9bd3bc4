package faults

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufabric/gpufabric/test/integration/itest"
)

// gang is what the API holds of a case's Job pods.
type gang struct {
	// live are the pods neither terminating nor terminal, by completion
	// index (the Job keeps at most one per index).
	live map[int]*corev1.Pod
	all  []corev1.Pod
}

func readGang(ctx context.Context, c kubernetes.Interface, ns string) (*gang, error) {
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	g := &gang{live: map[int]*corev1.Pod{}, all: pods.Items}
	for i := range pods.Items {
		p := &pods.Items[i]
		rank, live, err := liveRank(p)
		if err != nil {
			return nil, err
		}
		if !live {
			continue
		}
		if o := g.live[rank]; o != nil {
			return nil, fmt.Errorf("two live pods of index %d: %s and %s", rank, o.Name, p.Name)
		}
		g.live[rank] = p
	}
	return g, nil
}

// liveRank is a Job pod's completion index; live is false for a pod
// terminating or terminal.
func liveRank(p *corev1.Pod) (rank int, live bool, err error) {
	if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return 0, false, nil
	}
	rank, err = strconv.Atoi(p.Labels[batchv1.JobCompletionIndexAnnotation])
	if err != nil {
		return 0, false, fmt.Errorf("pod %s has no completion index: %w", p.Name, err)
	}
	return rank, true, nil
}

// bound counts the live pods bound to a node.
func (g *gang) bound() int {
	n := 0
	for _, p := range g.live {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

// running says why the gang of n is not wholly bound, if it is not.
func (g *gang) running(n int) error {
	if len(g.live) != n || g.bound() != n {
		return fmt.Errorf("%d of %d live pods bound (%s)", g.bound(), n, g)
	}
	return nil
}

// domainOf is the NVLink domain of rank's live pod ("" if unbound).
func (g *gang) domainOf(rank int) string {
	p := g.live[rank]
	if p == nil || p.Spec.NodeName == "" {
		return ""
	}
	return itest.DomainOf(p.Spec.NodeName)
}

// domains are the NVLink domains of the bound live pods.
func (g *gang) domains() []string {
	set := map[string]bool{}
	for r := range g.live {
		if d := g.domainOf(r); d != "" {
			set[d] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// uids are the live pods' UIDs by rank.
func (g *gang) uids() map[int]types.UID {
	out := map[int]types.UID{}
	for r, p := range g.live {
		out[r] = p.UID
	}
	return out
}

// String lists the live pods: rank=name@node.
func (g *gang) String() string {
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(g.live)) {
		p := g.live[r]
		parts = append(parts, fmt.Sprintf("%d=%s@%s", r, p.Name, p.Spec.NodeName))
	}
	return fmt.Sprint(parts)
}

// condition is the PodGroup's condition of type typ, or nil.
func condition(ctx context.Context, admin kubernetes.Interface, c *faultCase, typ string) (*metav1.Condition, error) {
	pg, err := podGroup(ctx, admin, c)
	if err != nil {
		return nil, err
	}
	return meta.FindStatusCondition(pg.Status.Conditions, typ), nil
}

// conditionIs waits until the case's PodGroup has condition typ with
// status and reason.
func conditionIs(ctx context.Context, admin kubernetes.Interface, c *faultCase, typ string, status metav1.ConditionStatus, reason string) error {
	cond, err := condition(ctx, admin, c, typ)
	if err != nil {
		return err
	}
	if cond == nil || cond.Status != status || cond.Reason != reason {
		return fmt.Errorf("%s: %+v, want %s %s", typ, cond, status, reason)
	}
	return nil
}

// since rounds a duration for the report.
func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }
