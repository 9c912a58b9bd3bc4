package extres

import (
	"context"
	"fmt"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/klog/v2"

	"github.com/gpufabric/gpufabric/pkg/gang/gate"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/placement/extended"
	"github.com/gpufabric/gpufabric/pkg/topology"
)

// Config is what the room needs: the client and gate for its writes, the
// informers' listers for its reads.
type Config struct {
	Client  kubernetes.Interface
	Claims  resourcelisters.ResourceClaimLister
	Classes resourcelisters.DeviceClassLister
	Gate    *gate.Gate
	// Parallelism is the number of claim writes in flight at once (at
	// least 1).
	Parallelism int
}

// Claims gives a gang's members their special claims (Attach). Safe for
// concurrent use.
type Claims struct{ cfg Config }

// New returns the room for cfg.
func New(cfg Config) *Claims {
	cfg.Parallelism = max(cfg.Parallelism, 1)
	return &Claims{cfg: cfg}
}

// write is one member's claim write: create its claim, after deleting
// stale (nil: none).
type write struct {
	pod   *v1.Pod
	claim *resourceapi.ResourceClaim
	stale *resourceapi.ResourceClaim
}

// Attach gives every member whose pod requests extended resources backed
// by DRA its special claim (added to Member.Claims) and sets
// Member.Extended. Rules:
//   - the claim is the one named ClaimName that IsFor the pod and asks
//     exactly what RequestOf says: it is used as it is, allocated or not;
//   - none yet: it is created, and the gang waits (placement.ErrNotReady)
//     until the informers show it (its creation wakes the gang);
//   - the pod's own claim asking for something else (a DeviceClass
//     changed) and reserved for nobody but the pod: it is deleted and
//     created anew, and the gang waits;
//   - a claim of that name that is not the pod's, or the pod's reserved
//     for others, or a creation the apiserver refuses (quota, admission):
//     the gang is refused with the reason (placement.ErrInvalid), and
//     nothing is changed.
//
// Every write passes the gate. An error that stops the scheduler
// (gate.Stops) is returned as it is.
func (c *Claims) Attach(ctx context.Context, g *placement.Gang) error {
	list, err := c.cfg.Classes.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list device classes: %w", err)
	}
	classes := NewClasses(list)
	var writes []write
	for i := range g.Members {
		m := &g.Members[i]
		r, err := RequestOf(m.Pod, classes)
		if err != nil {
			return err
		}
		if r == nil {
			continue
		}
		w, err := c.attach(m, r)
		if err != nil {
			return err
		}
		if w != nil {
			writes = append(writes, *w)
		}
	}
	if len(writes) == 0 {
		return nil
	}
	if err := c.write(ctx, writes); err != nil {
		return err
	}
	return fmt.Errorf("%w: %d extended-resource claims created (first: %s/%s for pod %s), not seen yet",
		placement.ErrNotReady, len(writes), writes[0].claim.Namespace, writes[0].claim.Name, writes[0].pod.Name)
}

// attach gives member m its claim for r when the informers show a usable
// one, or returns the write that makes one.
func (c *Claims) attach(m *placement.Member, r *Request) (*write, error) {
	p := m.Pod
	name := ClaimName(p)
	have, err := c.cfg.Claims.ResourceClaims(p.Namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		return &write{pod: p, claim: NewClaim(p, r)}, nil
	case err != nil:
		return nil, fmt.Errorf("get claim %s/%s: %w", p.Namespace, name, err)
	case !IsFor(have, p):
		return nil, fmt.Errorf("pod %s/%s: the name of its extended-resource claim, %s, is taken by a ResourceClaim that is not the pod's (annotation %s: \"true\" and the pod as controller owner); delete that claim: %w",
			p.Namespace, p.Name, have.Name, resourceapi.ExtendedResourceClaimAnnotation, placement.ErrInvalid)
	case have.DeletionTimestamp != nil:
		return nil, fmt.Errorf("%w: pod %s/%s: its extended-resource claim %s is being deleted", placement.ErrNotReady, p.Namespace, p.Name, have.Name)
	case !asks(have, r) && !reservedOnlyFor(have, p):
		return nil, fmt.Errorf("pod %s/%s: its extended-resource claim %s asks for other devices than its extended resources (%s) do now, and is reserved for other consumers too; delete the pod: %w",
			p.Namespace, p.Name, have.Name, namesOf(r.Names), placement.ErrInvalid)
	case !asks(have, r):
		return &write{pod: p, claim: NewClaim(p, r), stale: have}, nil
	}
	if !slices.ContainsFunc(m.Claims, func(o *resourceapi.ResourceClaim) bool { return o.UID == have.UID }) {
		m.Claims = append(m.Claims, have)
	}
	m.Extended = &extended.Resources{Pod: p.Name, Names: r.Names, Classes: r.Classes, Counts: r.Counts, Claim: have, Status: Status(have.Name, r)}
	return nil, nil
}

// write runs the writes in parallel; the first error wins, once the
// writes already started have returned.
func (c *Claims) write(ctx context.Context, writes []write) error {
	var (
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, c.cfg.Parallelism)
	var wg sync.WaitGroup
	for _, w := range writes {
		mu.Lock()
		stop := first != nil
		mu.Unlock()
		if stop {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := c.writeOne(ctx, w); err != nil {
				mu.Lock()
				if first == nil || gate.Stops(err) && !gate.Stops(first) {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// writeOne deletes a stale claim (its finalizer first), then creates the
// pod's claim. A claim that exists already is fine (the informers are
// behind); a refusal of the apiserver refuses the gang (ErrInvalid).
func (c *Claims) writeOne(ctx context.Context, w write) error {
	claims := c.cfg.Client.ResourceV1().ResourceClaims(w.claim.Namespace)
	object := w.claim.Namespace + "/" + w.claim.Name
	if w.stale != nil {
		if err := c.deleteStale(ctx, w.stale); err != nil {
			return err
		}
	}
	if err := c.cfg.Gate.Check(gate.StepExtendedClaim, object); err != nil {
		return err
	}
	_, err := claims.Create(ctx, w.claim, metav1.CreateOptions{FieldManager: topology.SchedulerName})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(2).Info("Created extended-resource claim", "pod", klog.KObj(w.pod), "claim", klog.KObj(w.claim))
		return nil
	case apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
		return fmt.Errorf("pod %s/%s: creating its extended-resource claim %s was refused: %v: %w", w.pod.Namespace, w.pod.Name, w.claim.Name, err, placement.ErrInvalid)
	}
	return fmt.Errorf("create extended-resource claim %s: %w", object, err)
}

// deleteStale deletes the pod's claim that asks for other devices: its
// delete-protection finalizer goes first (it holds no reservation but the
// pod's), then the claim, by UID.
func (c *Claims) deleteStale(ctx context.Context, rc *resourceapi.ResourceClaim) error {
	claims := c.cfg.Client.ResourceV1().ResourceClaims(rc.Namespace)
	object := rc.Namespace + "/" + rc.Name
	if i := slices.Index(rc.Finalizers, resourceapi.Finalizer); i >= 0 {
		if err := c.cfg.Gate.Check(gate.StepClaimFinalizer, object); err != nil {
			return err
		}
		rc = rc.DeepCopy()
		rc.Finalizers = slices.Delete(rc.Finalizers, i, i+1)
		if _, err := claims.Update(ctx, rc, metav1.UpdateOptions{FieldManager: topology.SchedulerName}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("remove the finalizer of stale claim %s: %w", object, err)
		}
	}
	if err := c.cfg.Gate.Check(gate.StepExtendedClaim, object); err != nil {
		return err
	}
	err := claims.Delete(ctx, rc.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &rc.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete stale claim %s: %w", object, err)
	}
	klog.FromContext(ctx).V(2).Info("Deleted stale extended-resource claim", "claim", klog.KObj(rc))
	return nil
}
