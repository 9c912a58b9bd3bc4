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
	"k8s.io/apimachinery/pkg/util/validation"

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
// (recover.go). The JSON is recordwire.go's.

// commitRecord is a commit record, decoded.
type commitRecord struct {
	Version int
	// Root names the record: the PodGroup (KindPodGroup, versions 1 and
	// 2) or the root CompositePodGroup of a tree (version 3).
	Root Root
	// Groups are the leaf PodGroups the commit places, each with where it
	// goes (for events and humans); one, the root itself, for a flat gang.
	Groups []recordGroup
	// Pods: every member being bound, with its node and its group.
	Pods []recordPod
	// Claims the commit writes, each once.
	Claims []recordClaim
}

type recordGroup struct {
	Namespace string
	Name      string
	UID       types.UID
	// Domain and TopologyKey where the group goes.
	Domain      string
	TopologyKey string
}

type recordPod struct {
	Name string
	UID  types.UID
	Node string
	// Group is the index of the pod's PodGroup in Groups.
	Group int
}

type recordClaim struct {
	Name string
	UID  types.UID
	// Pods are the members the claim is reserved for, each a pod of the
	// record: one for a member's own claim, several for a claim the
	// members share by name; none for a PodGroup claim (reserved for the
	// PodGroup).
	Pods []string
	// Groups are the indices of the PodGroups of a tree the claim is
	// reserved for (its leaves' PodGroup claims). None in a flat gang's
	// record, whose one PodGroup stands for every claim (versions 1 and
	// 2): its roll-back removes the PodGroup's reservation from every
	// claim of the record.
	Groups []int
	// Allocation is the fingerprint of the allocation the commit writes;
	// "" when the commit only adds reservations to an allocated claim.
	Allocation string
}

// tree reports whether the record is a tree's (version 3).
func (r *commitRecord) tree() bool { return r.Root.Kind == KindCompositePodGroup }

// object names the record's root for logs and events: "ns/name" for a
// PodGroup, "compositepodgroup ns/name" for a tree.
func (r *commitRecord) object() string { return r.Root.String() }

// newRecord describes a commit of decision d for PodGroup pg (a flat
// gang) with the given claim writes.
func newRecord(pg *schedulingv1beta1.PodGroup, d *placement.Decision, writes []claimWrite) *commitRecord {
	return newTreeRecord(rootOf(pg), []Leaf{{PodGroup: pg, Decision: d}}, writes)
}

// newTreeRecord describes a commit of leaves under root with the given
// claim writes (planLeafWrites of the leaves).
func newTreeRecord(root Root, leaves []Leaf, writes []claimWrite) *commitRecord {
	rec := &commitRecord{Version: recordVersion, Root: root, Groups: make([]recordGroup, len(leaves)), Claims: make([]recordClaim, 0, len(writes))}
	if rec.tree() {
		rec.Version = recordVersionTree
	}
	group := make(map[types.UID]int, len(leaves))
	pods := 0
	for i, l := range leaves {
		pods += len(l.Decision.Pods)
		rec.Groups[i] = recordGroup{Namespace: l.PodGroup.Namespace, Name: l.PodGroup.Name, UID: l.PodGroup.UID, Domain: l.Decision.Domain, TopologyKey: l.Decision.TopologyKey}
		group[l.PodGroup.UID] = i
	}
	rec.Pods = make([]recordPod, 0, pods)
	for i, l := range leaves {
		for _, p := range l.Decision.Pods {
			rec.Pods = append(rec.Pods, recordPod{Name: p.Name, UID: p.UID, Node: p.Node, Group: i})
		}
	}
	for _, w := range writes {
		rc := recordClaim{Name: w.claim.Name, UID: w.claim.UID}
		for _, c := range w.consumers {
			switch {
			case c.Resource == "pods":
				rc.Pods = append(rc.Pods, c.Name)
			case rec.tree():
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

// validate checks a record's shape: decoded, or before it is written.
func (r *commitRecord) validate() error {
	var p Problems
	root := "podGroup"
	switch {
	case r.Version != recordVersion1 && r.Version != recordVersion && r.Version != recordVersionTree:
		p.Addf("version %d, want %d, %d or %d", r.Version, recordVersion1, recordVersion, recordVersionTree)
	case (r.Version == recordVersionTree) != r.tree():
		p.Addf("version %d with a root of kind %q", r.Version, Shorten(r.Root.Kind, 40))
	}
	if r.tree() {
		root = "root"
	}
	if msgs := validation.IsDNS1123Label(r.Root.Namespace); len(msgs) > 0 {
		p.Addf("%s.namespace %q: %s", root, Shorten(r.Root.Namespace, 64), strings.Join(msgs, "; "))
	}
	p.Name(root+".name", r.Root.Name)
	p.UID(root+".uid", r.Root.UID)
	r.validateGroups(&p)
	pods := r.validatePods(&p)
	r.validateClaims(&p, pods)
	return p.Err()
}

// validateGroups checks the leaf PodGroups: a flat record's one group is
// its root; a tree's are 1..MaxRecordGroups distinct PodGroups of the
// root's namespace.
func (r *commitRecord) validateGroups(p *Problems) {
	text := func(g recordGroup) bool { return len(g.Domain) > MaxRecordText || len(g.TopologyKey) > MaxRecordText }
	if !r.tree() {
		switch {
		case len(r.Groups) != 1:
			p.Addf("%d groups in the record of a podgroup, want 1", len(r.Groups))
		case r.Groups[0].Namespace != r.Root.Namespace || r.Groups[0].Name != r.Root.Name || r.Groups[0].UID != r.Root.UID:
			p.Addf("the group of a podgroup's record is not the podgroup")
		case text(r.Groups[0]):
			p.Addf("domain or key longer than %d bytes", MaxRecordText)
		}
		return
	}
	if len(r.Groups) == 0 || len(r.Groups) > MaxRecordGroups {
		p.Addf("%d groups, want 1..%d", len(r.Groups), MaxRecordGroups)
		return
	}
	names := make(map[string]bool, len(r.Groups))
	uids := make(map[types.UID]bool, len(r.Groups))
	for i, g := range r.Groups {
		if g.Namespace != r.Root.Namespace {
			p.Addf("groups[%d].namespace %q is not the root's", i, Shorten(g.Namespace, 64))
		}
		p.nameAt("groups", i, "name", g.Name)
		p.uidAt("groups", i, "uid", g.UID)
		switch {
		case g.UID == r.Root.UID:
			p.Addf("groups[%d]: uid %q is the root's", i, Shorten(string(g.UID), 64))
		case names[g.Name] || uids[g.UID]:
			p.Addf("groups[%d]: podgroup %q listed twice", i, Shorten(g.Name, 64))
		}
		names[g.Name], uids[g.UID] = true, true
		if text(g) {
			p.Addf("groups[%d]: domain or key longer than %d bytes", i, MaxRecordText)
		}
	}
}

// validatePods checks the pods (1..MaxRecordPods, each once, each in a
// group, every group with one at least) and returns their names.
func (r *commitRecord) validatePods(p *Problems) map[string]bool {
	if len(r.Pods) == 0 || len(r.Pods) > MaxRecordPods {
		p.Addf("%d pods, want 1..%d", len(r.Pods), MaxRecordPods)
	}
	pods := make(map[string]bool, min(len(r.Pods), MaxRecordPods))
	perGroup := make([]int, len(r.Groups))
	for i, rp := range r.Pods {
		p.nameAt("pods", i, "n", rp.Name)
		p.uidAt("pods", i, "u", rp.UID)
		p.nameAt("pods", i, "node", rp.Node)
		if pods[rp.Name] {
			p.Addf("pods[%d]: pod %q listed twice", i, rp.Name)
		}
		pods[rp.Name] = true
		if rp.Group < 0 || rp.Group >= len(r.Groups) {
			p.Addf("pods[%d].g: group %d of %d", i, rp.Group, len(r.Groups))
			continue
		}
		perGroup[rp.Group]++
	}
	for g, n := range perGroup {
		if n == 0 && len(r.Pods) > 0 {
			p.Addf("groups[%d] (%s) has no pod", g, Shorten(r.Groups[g].Name, 64))
		}
	}
	return pods
}

// validateClaims checks the claims: each once, its pods in the record,
// its groups in range and each once (none in a flat record's), a tree's
// reserved for some pod or group.
func (r *commitRecord) validateClaims(p *Problems, pods map[string]bool) {
	if len(r.Claims) > MaxRecordClaims {
		p.Addf("%d claims, over the limit of %d", len(r.Claims), MaxRecordClaims)
	}
	claims := map[string]bool{}
	seen := make([]bool, len(r.Groups)) // a claim's groups, reset after each
	for i, c := range r.Claims {
		p.nameAt("claims", i, "n", c.Name)
		p.uidAt("claims", i, "u", c.UID)
		users := make(map[string]bool, len(c.Pods))
		for _, pod := range c.Pods {
			switch {
			case !pods[pod]:
				p.Addf("claims[%d]: pod %q is not in the record", i, Shorten(pod, 64))
			case users[pod]:
				p.Addf("claims[%d]: pod %q listed twice", i, pod)
			}
			users[pod] = true
		}
		for _, g := range c.Groups {
			switch {
			case g < 0 || g >= len(r.Groups):
				p.Addf("claims[%d].g: group %d of %d", i, g, len(r.Groups))
			case seen[g]:
				p.Addf("claims[%d].g: group %d listed twice", i, g)
			default:
				seen[g] = true
			}
		}
		for _, g := range c.Groups {
			if g >= 0 && g < len(seen) {
				seen[g] = false
			}
		}
		switch {
		case !r.tree() && len(c.Groups) > 0:
			p.Addf("claims[%d].g: %d groups in the record of a podgroup", i, len(c.Groups))
		case r.tree() && len(c.Pods) == 0 && len(c.Groups) == 0:
			p.Addf("claims[%d]: reserved for no pod and no group", i)
		}
		if c.Allocation != "" && !isFingerprint(c.Allocation) {
			p.Addf("claims[%d].alloc %q is not a fingerprint", i, Shorten(c.Allocation, 40))
		}
		if claims[c.Name] {
			p.Addf("claims[%d]: claim %q listed twice", i, c.Name)
		}
		claims[c.Name] = true
	}
}

// nameAt is Name for field f of entry i of a list; the field's name is
// only formatted for a problem (a record lists up to 10,000 pods).
func (p *Problems) nameAt(list string, i int, f, name string) {
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		p.Name(fmt.Sprintf("%s[%d].%s", list, i, f), name)
	}
}

// uidAt is UID for field f of entry i of a list.
func (p *Problems) uidAt(list string, i int, f string, uid types.UID) {
	if !isUID(uid) {
		p.UID(fmt.Sprintf("%s[%d].%s", list, i, f), uid)
	}
}

func isFingerprint(s string) bool {
	if len(s) != 32 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
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
