package evict

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// ClaimRelease bounds how long a whole-gang restart waits, once its old
// members are gone, for their own claims (made from their templates, and
// their extended resources' claims) to release their devices.
// kube-controller-manager deletes a pod's claims after the pod; until
// then their devices look taken, and the new gang's first attempt would
// find its previous domain full and go elsewhere.
const ClaimRelease = 15 * time.Second

// Bounds of what a Restarter remembers of old members' claims: per
// restart, and restarts at once (past it, all are forgotten: those
// restarts just do not wait).
const (
	maxOldClaims  = 4096
	maxClaimWaits = 1024
)

// oldClaims are the claims of one restart's old members, noted while the
// members were going.
type oldClaims struct {
	boundary time.Time
	names    sets.Set[string]
	// gone: when the old members were first seen all gone (zero: not yet).
	gone time.Time
}

// podClaims are the names of the claims pod p owns.
func podClaims(p *v1.Pod) []string {
	var out []string
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil {
			out = append(out, *st.ResourceClaimName)
		}
	}
	if st := p.Status.ExtendedResourceClaimStatus; st != nil && st.ResourceClaimName != "" {
		out = append(out, st.ResourceClaimName)
	}
	return out
}

// noteClaims remembers the claims of old member p of the restart of key
// at boundary.
func (r *Restarter) noteClaims(key string, boundary time.Time, p *v1.Pod) {
	names := podClaims(p)
	if len(names) == 0 || r.cfg.Claims == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	oc := r.claims[key]
	if oc == nil || !oc.boundary.Equal(boundary) {
		if len(r.claims) >= maxClaimWaits {
			clear(r.claims)
		}
		oc = &oldClaims{boundary: boundary, names: sets.New[string]()}
		r.claims[key] = oc
	}
	for _, n := range names {
		if oc.names.Len() < maxOldClaims {
			oc.names.Insert(n)
		}
	}
}

// claimsHeld reports whether a claim of the old members of the restart of
// key at boundary, all gone now, still has devices allocated, within
// ClaimRelease of their going; the restart waits for them.
func (r *Restarter) claimsHeld(key, namespace string, boundary time.Time) bool {
	r.mu.Lock()
	oc := r.claims[key]
	if oc == nil || !oc.boundary.Equal(boundary) {
		delete(r.claims, key)
		r.mu.Unlock()
		return false
	}
	now := r.clock.Now()
	if oc.gone.IsZero() {
		oc.gone = now
	}
	if now.Sub(oc.gone) >= ClaimRelease {
		delete(r.claims, key)
		r.mu.Unlock()
		return false
	}
	names := sets.List(oc.names)
	r.mu.Unlock()
	var held []string
	for _, n := range names {
		if c, err := r.cfg.Claims.ResourceClaims(namespace).Get(n); err == nil && c.Status.Allocation != nil {
			held = append(held, n)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(held) == 0 {
		delete(r.claims, key)
		return false
	}
	oc.names = sets.New(held...)
	return true
}
