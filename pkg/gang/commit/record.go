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

// A commit record says what a PodGroup commit is about to write. It lives
// in the record Store, named vocab.RecordName(<PodGroup UID>), split over
// further parts when it is larger than one object holds (chunks.go). It
// is created before the first claim write and deleted after the last
// write; its presence means "a commit of this gang may be half done".
// Recovery still validates it against live objects before it acts
// (recover.go). The JSON is recordwire.go's.

// commitRecord is a commit record, decoded.
type commitRecord struct {
	Version  int
	PodGroup recordGroup
	// Domain and TopologyKey where the gang goes, for events and humans.
	Domain      string
	TopologyKey string
	// Pods: every member being bound, with its node.
	Pods []recordPod
	// Claims the commit writes, each once.
	Claims []recordClaim
}

type recordGroup struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
}

type recordPod struct {
	Name string
	UID  types.UID
	Node string
}

type recordClaim struct {
	Name string
	UID  types.UID
	// Pods are the members the claim is reserved for, each a pod of the
	// record: one for a member's own claim, several for a claim the
	// members share by name; none for a PodGroup claim (reserved for the
	// PodGroup).
	Pods []string
	// Allocation is the fingerprint of the allocation the commit writes;
	// "" when the commit only adds reservations to an allocated claim.
	Allocation string
}

// newRecord describes a commit of decision d for pg with the given claim
// writes.
func newRecord(pg *schedulingv1beta1.PodGroup, d *placement.Decision, writes []claimWrite) *commitRecord {
	rec := &commitRecord{
		Version:     recordVersion,
		PodGroup:    recordGroup{Namespace: pg.Namespace, Name: pg.Name, UID: pg.UID},
		Domain:      d.Domain,
		TopologyKey: d.TopologyKey,
		Pods:        make([]recordPod, 0, len(d.Pods)),
		Claims:      make([]recordClaim, 0, len(writes)),
	}
	for _, p := range d.Pods {
		rec.Pods = append(rec.Pods, recordPod{Name: p.Name, UID: p.UID, Node: p.Node})
	}
	for _, w := range writes {
		rc := recordClaim{Name: w.claim.Name, UID: w.claim.UID}
		for _, c := range w.consumers {
			if c.Resource == "pods" {
				rc.Pods = append(rc.Pods, c.Name)
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

// validate checks a decoded record's shape.
func (r *commitRecord) validate() error {
	var p Problems
	if r.Version != recordVersion1 && r.Version != recordVersion {
		p.Addf("version %d, want %d or %d", r.Version, recordVersion1, recordVersion)
	}
	if msgs := validation.IsDNS1123Label(r.PodGroup.Namespace); len(msgs) > 0 {
		p.Addf("podGroup.namespace %q: %s", r.PodGroup.Namespace, strings.Join(msgs, "; "))
	}
	p.Name("podGroup.name", r.PodGroup.Name)
	p.UID("podGroup.uid", r.PodGroup.UID)
	if len(r.Domain) > MaxRecordText || len(r.TopologyKey) > MaxRecordText {
		p.Addf("domain or key longer than %d bytes", MaxRecordText)
	}
	if len(r.Pods) == 0 || len(r.Pods) > MaxRecordPods {
		p.Addf("%d pods, want 1..%d", len(r.Pods), MaxRecordPods)
	}
	pods := map[string]bool{}
	for i, rp := range r.Pods {
		p.nameAt("pods", i, "n", rp.Name)
		p.uidAt("pods", i, "u", rp.UID)
		p.nameAt("pods", i, "node", rp.Node)
		if pods[rp.Name] {
			p.Addf("pods[%d]: pod %q listed twice", i, rp.Name)
		}
		pods[rp.Name] = true
	}
	if len(r.Claims) > MaxRecordClaims {
		p.Addf("%d claims, over the limit of %d", len(r.Claims), MaxRecordClaims)
	}
	claims := map[string]bool{}
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
		if c.Allocation != "" && !isFingerprint(c.Allocation) {
			p.Addf("claims[%d].alloc %q is not a fingerprint", i, Shorten(c.Allocation, 40))
		}
		if claims[c.Name] {
			p.Addf("claims[%d]: claim %q listed twice", i, c.Name)
		}
		claims[c.Name] = true
	}
	return p.Err()
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

// recordSet holds the commit records this term knows of, by PodGroup UID:
// those listed at the start of the term and those it wrote since. Only the
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

// get returns the record of the PodGroup with uid, nil if none.
func (r *recordSet) get(uid types.UID) *v1.ConfigMap {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byUID[uid]
}
