package commit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufabric/gpufabric/pkg/gang/commit/recordwire"
	"github.com/gpufabric/gpufabric/pkg/gang/placement"
	"github.com/gpufabric/gpufabric/pkg/gang/podstate"
	"github.com/gpufabric/gpufabric/pkg/gang/vocab"
)

// A commit record says what a commit is about to write. It lives in the
// record Store, named vocab.RecordName(<root UID>): the PodGroup of a
// flat gang, the root CompositePodGroup of a tree (one record holds the
// commit of every leaf PodGroup placed with the tree). It is split over
// further parts when it is larger than one object holds (chunks.go). It
// is created before the first claim write and deleted after the last
// write; its presence means "a commit of this gang (tree) may be half
// done". Recovery still validates it against live objects before it acts
// (recover.go). What it holds, its validation and its JSON are the leaf
// pkg/gang/commit/recordwire's.

// commitRecord is a commit record, decoded (recordwire: what it holds,
// its validation and its JSON).
type commitRecord = recordwire.Record

// newRecord describes a commit of decision d for PodGroup pg (a flat
// gang) with the given claim writes.
func newRecord(pg *schedulingv1beta1.PodGroup, d *placement.Decision, writes []claimWrite) *commitRecord {
	return newTreeRecord(rootOf(pg), []Leaf{{PodGroup: pg, Decision: d}}, writes)
}

// newTreeRecord describes a commit of leaves under root with the given
// claim writes (planLeafWrites of the leaves).
func newTreeRecord(root Root, leaves []Leaf, writes []claimWrite) *commitRecord {
	rec := &commitRecord{Version: recordwire.Version2, Root: root, Groups: make([]recordwire.Group, len(leaves)), Claims: make([]recordwire.Claim, 0, len(writes))}
	if rec.Tree() {
		rec.Version = recordwire.VersionTree
	}
	group := make(map[types.UID]int, len(leaves))
	pods := 0
	for i, l := range leaves {
		pods += len(l.Decision.Pods)
		rec.Groups[i] = recordwire.Group{Namespace: l.PodGroup.Namespace, Name: l.PodGroup.Name, UID: l.PodGroup.UID, Domain: l.Decision.Domain, TopologyKey: l.Decision.TopologyKey}
		group[l.PodGroup.UID] = i
	}
	rec.Pods = make([]recordwire.Pod, 0, pods)
	for i, l := range leaves {
		for _, p := range l.Decision.Pods {
			rec.Pods = append(rec.Pods, recordwire.Pod{Name: p.Name, UID: p.UID, Node: p.Node, Group: i})
		}
	}
	for _, w := range writes {
		rc := recordwire.Claim{Name: w.claim.Name, UID: w.claim.UID}
		for _, c := range w.consumers {
			switch {
			case c.Resource == "pods":
				rc.Pods = append(rc.Pods, c.Name)
			case rec.Tree():
				if g, ok := group[c.UID]; ok && c.Resource == "podgroups" {
					rc.Groups = append(rc.Groups, g)
				}
			}
		}
		if w.alloc != nil {
			rc.Allocation = AllocationFingerprint(w.alloc)
		}
		rec.Claims = append(rec.Claims, rc)
	}
	return rec
}

// AllocationFingerprint identifies the devices of an allocation, as commit
// records store it: a hash of its results' request, driver, pool and
// device, in order.
func AllocationFingerprint(a *resourceapi.AllocationResult) string {
	h := sha256.New()
	for _, r := range a.Devices.Results {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00", r.Request, r.Driver, r.Pool, r.Device)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// isMember reports whether p is a member of pg that this scheduler places.
func isMember(p *v1.Pod, pg *schedulingv1beta1.PodGroup) bool {
	return p != nil && pg != nil && p.Namespace == pg.Namespace && podGroupName(p) == pg.Name && podstate.Ours(p)
}

// podGroupName is the PodGroup a pod names, "" for none.
func podGroupName(p *v1.Pod) string {
	if p.Spec.SchedulingGroup == nil || p.Spec.SchedulingGroup.PodGroupName == nil {
		return ""
	}
	return *p.Spec.SchedulingGroup.PodGroupName
}

// recordSet holds the commit records this term knows of, by root UID (a
// flat gang's PodGroup, a tree's root CompositePodGroup): those listed at the start of the term and those it wrote since. Only the
// leader writes records, so the set is exact while it leads. Safe for
// concurrent use.
type recordSet struct {
	mu    sync.Mutex
	byUID map[types.UID]*v1.ConfigMap
}

func newRecordSet() *recordSet { return &recordSet{byUID: map[types.UID]*v1.ConfigMap{}} }

func recordUID(cm *v1.ConfigMap) types.UID {
	return types.UID(strings.TrimPrefix(cm.Name, vocab.RecordPrefix))
}

func (r *recordSet) put(cm *v1.ConfigMap) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byUID[recordUID(cm)] = cm
}

func (r *recordSet) remove(cm *v1.ConfigMap) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.byUID[recordUID(cm)]; cur != nil && cur.UID == cm.UID {
		delete(r.byUID, recordUID(cm))
	}
}

// all returns every record of the set.
func (r *recordSet) all() []*v1.ConfigMap {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*v1.ConfigMap, 0, len(r.byUID))
	for _, cm := range r.byUID {
		out = append(out, cm)
	}
	return out
}

// get returns the record of the root with uid, nil if none.
func (r *recordSet) get(uid types.UID) *v1.ConfigMap {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byUID[uid]
}
